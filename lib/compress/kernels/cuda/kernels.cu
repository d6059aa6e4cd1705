// hipress compress: the CUDA kernels behind ``kernels.cuda`` (compiled by CuPy's NVRTC, -fmad=false).
//
// Each kernel mirrors one numba kernel of ``kernels.quantize`` / ``kernels.dense`` element for
// element: the same float32 operations in the same order, no multiply-add contraction, so the codes
// (and residuals) are bit-identical to the CPU backend's. Loops are grid-stride, so any grid is
// correct; bit-packed kernels give each thread whole output bytes (no two threads write one byte).
// No kernel uses shared memory, warp intrinsics or __syncthreads: the tests compile this file as
// host C++ and run every kernel with a sequential thread emulator against the CPU backend.
// Reductions write one partial per thread (a fixed thread count: deterministic on a device).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define HP_TID ((i64) blockIdx.x * (i64) blockDim.x + (i64) threadIdx.x)
#define HP_STRIDE ((i64) gridDim.x * (i64) blockDim.x)
#define HP_FMAX 3.4028234663852886e38f
#define HP_CRC_SEG 1024LL

__device__ __forceinline__ int hp_bad(float v) { return !(fabsf(v) <= HP_FMAX); }

// lowbias32 of (i * golden + seed) mod 2^32, top 24 bits as a float in [0, 1): common.uniform01
__device__ __forceinline__ float hp_uniform(u32 seed, i64 i) {
    u32 x = (u32) i * 0x9E3779B9u + seed;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return (float) (int) (x >> 8) * (1.0f / 16777216.0f);
}

// ---------------------------------------------------------------------------- CRC-32 (zlib's)
// a * b modulo the CRC-32 polynomial, reflected (zlib's multmodp)
__device__ __forceinline__ u32 hp_multmodp(u32 a, u32 b) {
    u32 m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ 0xEDB88320u : b >> 1;
    }
    return p;
}

// x^(8 * nbytes) modulo the polynomial; x2n[k] = x^(2^k) (zlib's x2nmodp with k = 3)
__device__ __forceinline__ u32 hp_x8n(i64 nbytes, const u32* __restrict__ x2n) {
    u32 p = 1u << 31;
    unsigned k = 3;
    u64 n = (u64) nbytes;
    while (n) {
        if (n & 1) p = hp_multmodp(x2n[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

// Standard CRC-32 of each HP_CRC_SEG-byte segment of p[0, len), shifted to its place
// (crc32_combine's linearity) and xor-ed into *out: *out = crc32(p[0, len)) for *out = 0 before.
// table holds zlib's four slicing tables (4 x 256): four bytes per step from one aligned 32-bit load
// when p is 4-byte aligned, one byte per step otherwise and for a segment's last len % 4 bytes.
extern "C" __global__ void crc32_segments(const u8* __restrict__ p, i64 len, const u32* __restrict__ table,
                                          const u32* __restrict__ x2n, u32* out) {
    i64 nseg = (len + HP_CRC_SEG - 1) / HP_CRC_SEG;
    int aligned = (((u64) p) & 3u) == 0;
    for (i64 s = HP_TID; s < nseg; s += HP_STRIDE) {
        i64 a = s * HP_CRC_SEG;
        i64 b = a + HP_CRC_SEG < len ? a + HP_CRC_SEG : len;
        u32 c = 0xFFFFFFFFu;
        i64 i = a;
        if (aligned) {
            const u32* w = (const u32*) (p + a);
            i64 words = (b - a) >> 2;
            for (i64 k = 0; k < words; k++) {
                c ^= w[k];  // little-endian: byte a + 4k in the low bits
                c = table[768 + (c & 0xFFu)] ^ table[512 + ((c >> 8) & 0xFFu)] ^ table[256 + ((c >> 16) & 0xFFu)]
                    ^ table[c >> 24];
            }
            i = a + 4 * words;
        }
        for (; i < b; i++) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
        c ^= 0xFFFFFFFFu;
        atomicXor(out, hp_multmodp(hp_x8n(len - b, x2n), c));
    }
}

// ---------------------------------------------------------------------------- tbq (2 bits)
// Per thread: sum of |v|, sum of |v| where |v| >= tau (float64), count of those; v = g (+ r). Read-only.
extern "C" __global__ void tbq_stats(const float* __restrict__ g, const float* __restrict__ r, int use_r, float tau,
                                     i64 n, double* __restrict__ tot, double* __restrict__ sel, i64* __restrict__ cnt) {
    double st = 0.0, ss = 0.0;
    i64 c = 0;
    for (i64 i = HP_TID; i < n; i += HP_STRIDE) {
        float v = g[i];
        if (use_r) v = v + r[i];
        float a = fabsf(v);
        st += (double) a;
        if (a >= tau) {
            ss += (double) a;
            c++;
        }
    }
    tot[HP_TID] = st;
    sel[HP_TID] = ss;
    cnt[HP_TID] = c;
}

// ---------------------------------------------------------------------------- sign bits (onebit, signSGD)
// Per thread: sum of v >= 0, sum of v < 0 (float64), count of v >= 0; v = g (+ r), left in r.
extern "C" __global__ void sign_stats(const float* __restrict__ g, float* __restrict__ r, int use_r, i64 n,
                                      double* __restrict__ ps, double* __restrict__ ns, i64* __restrict__ cnt) {
    double sp = 0.0, sn = 0.0;
    i64 c = 0;
    for (i64 i = HP_TID; i < n; i += HP_STRIDE) {
        float v = g[i];
        if (use_r) {
            v = v + r[i];
            r[i] = v;
        }
        if (v >= 0.0f) {
            sp += (double) v;
            c++;
        } else {
            sn += (double) v;
        }
    }
    ps[HP_TID] = sp;
    ns[HP_TID] = sn;
    cnt[HP_TID] = c;
}

// ---------------------------------------------------------------------------- adaptive tbq in blocks
// The float64 sums of |v| >= tau and their count, in simd.tbq_block8's 8 lanes and order.
__device__ __forceinline__ void hp_abs_sums(const float* g, const float* r, int use_r, i64 s, i64 e, float tau,
                                            double* total, i64* count) {
    double p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    i64 c = 0;
    for (i64 i = s; i < e; i++) {
        float v = g[i];
        if (use_r) v = v + r[i];
        float a = fabsf(v);
        if (a >= tau) {
            p[(i - s) & 7] += (double) a;
            c++;
        }
    }
    *total = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    *count = c;
}

// One thread per block of bk elements: tau = scale * mean|v| and value = mean of |v| >= tau
// (simd.tbq_block8: 1 and 1 where tau is not a positive finite float32).
extern "C" __global__ void tbq_block_rule(const float* __restrict__ g, const float* __restrict__ r, int use_r,
                                          int bk, float scale, i64 n, float* __restrict__ taus,
                                          float* __restrict__ values) {
    i64 nb = (n + bk - 1) / bk;
    for (i64 k = HP_TID; k < nb; k += HP_STRIDE) {
        i64 s = k * bk;
        i64 e = s + bk < n ? s + bk : n;
        double total, above;
        i64 count;
        hp_abs_sums(g, r, use_r, s, e, 0.0f, &total, &count);
        float tau = (float) ((double) scale * (total / (double) (e - s)));
        float value = 1.0f;
        if (!(tau > 0.0f && tau <= HP_FMAX)) {
            tau = 1.0f;
        } else {
            hp_abs_sums(g, r, use_r, s, e, tau, &above, &count);
            value = count > 0 ? (float) (above / (double) count) : tau;
            if (!(value >= tau && value <= HP_FMAX)) value = tau;
        }
        taus[k] = tau;
        values[k] = value;
    }
}

// Codes 2 / 0 / 1 for v >= tau / <= -tau / else with the tau and value of each byte's block (bk is a
// multiple of 4; one block, bk >= n, for the fixed rule and the per-tensor one); r <- v - (code - 1) * value.
extern "C" __global__ void tbq_blocks_encode(const float* __restrict__ g, float* __restrict__ r, int use_r,
                                             const float* __restrict__ taus, const float* __restrict__ values,
                                             i64 bk, u8* __restrict__ out, i64 n, int* flag) {
    i64 m = (n + 3) >> 2;
    int bad = 0;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        i64 k = (j * 4) / bk;
        float tau = taus[k], value = values[k], ntau = -taus[k];
        u32 byte = 0;
        for (int t = 0; t < 4; t++) {
            i64 i = j * 4 + t;
            if (i >= n) break;
            float v = g[i];
            if (use_r) v = v + r[i];
            float q = v >= tau ? 1.0f : 0.0f;
            q = v <= ntau ? -1.0f : q;
            if (use_r) r[i] = v - q * value;
            byte |= (u32) ((int) q + 1) << (2 * t);
            bad |= hp_bad(v);
        }
        out[j] = (u8) byte;
    }
    if (bad) *flag = 1;
}

// *flag = 1 if a 2-bit field of some byte of p[0:m] holds 3 (never written by the encoder), padding
// included (as the CPU). Launched before tbq_blocks_decode: a refused body leaves out as it was.
extern "C" __global__ void tbq_code3(const u8* __restrict__ p, i64 m, int* flag) {
    int bad = 0;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        u32 b = p[j];
        bad |= (int) (b & (b >> 1) & 0x55u);
    }
    if (bad) *flag = 1;
}

extern "C" __global__ void tbq_blocks_decode(const u8* __restrict__ p, const float* __restrict__ values, i64 bk,
                                             float* __restrict__ out, int add, i64 n) {
    i64 m = (n + 3) >> 2;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        i64 k = (j * 4) / bk;
        float value = values[k];
        u32 b = p[j];
        for (int t = 0; t < 4; t++) {
            i64 i = j * 4 + t;
            if (i >= n) break;
            float v = ((float) ((b >> (2 * t)) & 3u) - 1.0f) * value;
            out[i] = add ? out[i] + v : v;
        }
    }
}

// ---------------------------------------------------------------------------- onebit in blocks
// One thread per block of bk elements (a power of two): v = g (+ r) into r, the float64 sums of
// v >= 0 and v < 0 in 8 lanes (element i of the block in lane i % 8, lanes added as
// ((0+1)+(2+3))+((4+5)+(6+7)): simd.onebit_block8's order, so the scales are the CPU's), the
// two float32 means (0 where a class is empty) into scales[2k], scales[2k + 1].
extern "C" __global__ void onebit_block_scales(const float* __restrict__ g, float* __restrict__ r, int use_r, int bk,
                                               i64 n, float* __restrict__ scales, int* flag) {
    i64 nb = (n + bk - 1) / bk;
    int bad = 0;
    for (i64 k = HP_TID; k < nb; k += HP_STRIDE) {
        i64 s = k * bk;
        i64 e = s + bk < n ? s + bk : n;
        double p[8] = {0, 0, 0, 0, 0, 0, 0, 0}, q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        i64 c = 0;
        for (i64 i = s; i < e; i++) {
            float v = g[i];
            if (use_r) {
                v = v + r[i];
                r[i] = v;
            }
            bad |= hp_bad(v);
            int l = (int) ((i - s) & 7);
            if (v >= 0.0f) {
                p[l] += (double) v;
                c++;
            } else {
                q[l] += (double) v;
            }
        }
        double sp = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
        double sn = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
        i64 cn = (e - s) - c;
        scales[2 * k] = c > 0 ? (float) (sp / (double) c) : 0.0f;
        scales[2 * k + 1] = cn > 0 ? (float) (sn / (double) cn) : 0.0f;
    }
    if (bad) *flag = 1;
}

// Bit 1 where v >= 0, LSB first, with the scales of the byte's block (a byte's 8 elements are in
// one block: bk is a multiple of 8; one block, bk >= n, for HiPress's one pair per gradient and for
// signSGD); with use_r, r holds v and becomes v - (pos or neg).
extern "C" __global__ void sign_blocks_encode(const float* __restrict__ g, float* __restrict__ r, int use_r,
                                              const float* __restrict__ scales, i64 bk, u8* __restrict__ out, i64 n) {
    i64 m = (n + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        i64 k = (j * 8) / bk;
        float pos = scales[2 * k], neg = scales[2 * k + 1];
        u32 byte = 0;
        for (int t = 0; t < 8; t++) {
            i64 i = j * 8 + t;
            if (i >= n) break;
            int ge;
            if (use_r) {
                float v = r[i];
                ge = v >= 0.0f;
                r[i] = v - (ge ? pos : neg);
            } else {
                ge = g[i] >= 0.0f;
            }
            byte |= (u32) ge << t;
        }
        out[j] = (u8) byte;
    }
}

extern "C" __global__ void sign_blocks_decode(const u8* __restrict__ p, const float* __restrict__ scales, i64 bk,
                                              float* __restrict__ out, int add, i64 n) {
    i64 m = (n + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        i64 k = (j * 8) / bk;
        float pos = scales[2 * k], neg = scales[2 * k + 1];
        u32 b = p[j];
        for (int t = 0; t < 8; t++) {
            i64 i = j * 8 + t;
            if (i >= n) break;
            float v = ((b >> t) & 1u) ? pos : neg;
            out[i] = add ? out[i] + v : v;
        }
    }
}

// ---------------------------------------------------------------------------- b-bit linear (TernGrad)
// q = floor((g - lo) / gap + u) clipped to [0, 2^bits - 1]; u = uniform(seed, i) or 0.5; 0 if gap <= 0.
extern "C" __global__ void linear_encode(const float* __restrict__ g, float lo, float gap, int bits, int stochastic,
                                         u32 seed, u8* __restrict__ out, i64 n) {
    int per = 8 / bits;
    int qmax = (1 << bits) - 1;
    i64 m = (n * bits + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        u32 byte = 0;
        for (int k = 0; k < per; k++) {
            i64 i = j * per + k;
            if (i >= n) break;
            int q = 0;
            if (gap > 0.0f) {
                float u = stochastic ? hp_uniform(seed, i) : 0.5f;
                float x = (g[i] - lo) / gap + u;
                q = (int) floorf(x);
                q = q < 0 ? 0 : (q > qmax ? qmax : q);
            }
            byte |= (u32) q << (k * bits);
        }
        out[j] = (u8) byte;
    }
}

// v = lo + q * gap, at most hi (the top level can round past it; quantize._level says why no clamp at lo)
extern "C" __global__ void linear_decode(const u8* __restrict__ p, float lo, float hi, float gap, int bits,
                                         float* __restrict__ out, int add, i64 n) {
    int per = 8 / bits;
    u32 mask = (1u << bits) - 1u;
    i64 m = (n * bits + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        u32 b = p[j];
        for (int k = 0; k < per; k++) {
            i64 i = j * per + k;
            if (i >= n) break;
            float v = lo + (float) ((b >> (k * bits)) & mask) * gap;
            v = v > hi ? hi : v;
            out[i] = add ? out[i] + v : v;
        }
    }
}

// ---------------------------------------------------------------------------- QSGD (bucketed)
// ss[k] = sum over bucket k of double(x)^2, in element order (one thread per bucket: the CPU's order).
extern "C" __global__ void sumsq_buckets(const float* __restrict__ x, i64 n, i64 bucket, double* __restrict__ ss,
                                         i64 nb) {
    for (i64 k = HP_TID; k < nb; k += HP_STRIDE) {
        i64 a = k * bucket;
        i64 b = a + bucket < n ? a + bucket : n;
        double s = 0.0;
        for (i64 i = a; i < b; i++) {
            double d = (double) x[i];
            s = s + d * d;
        }
        ss[k] = s;
    }
}

// code = sign << (bits-1) | level, level = min(s, floor(|g| / norm * s + u)); sign only where norm <= 0.
extern "C" __global__ void qsgd_encode(const float* __restrict__ g, const float* __restrict__ norms, i64 bucket,
                                       int levels, int bits, u32 seed, u8* __restrict__ out, i64 n) {
    int per = 8 / bits;
    int sbit = 1 << (bits - 1);
    float sf = (float) levels;
    i64 m = (n * bits + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        u32 byte = 0;
        for (int k = 0; k < per; k++) {
            i64 i = j * per + k;
            if (i >= n) break;
            float x = g[i];
            float norm = norms[i / bucket];
            int code = x < 0.0f ? sbit : 0;
            if (norm > 0.0f) {
                float y = fabsf(x) / norm * sf + hp_uniform(seed, i);
                int lvl = (int) floorf(y);
                code |= lvl < levels ? lvl : levels;
            }
            byte |= (u32) code << (k * bits);
        }
        out[j] = (u8) byte;
    }
}

extern "C" __global__ void qsgd_decode(const u8* __restrict__ p, const float* __restrict__ norms, i64 bucket,
                                       int levels, int bits, float* __restrict__ out, int add, i64 n) {
    int per = 8 / bits;
    u32 sbit = 1u << (bits - 1);
    u32 lmask = sbit - 1u;
    u32 mask = (1u << bits) - 1u;
    float sf = (float) levels;
    i64 m = (n * bits + 7) >> 3;
    for (i64 j = HP_TID; j < m; j += HP_STRIDE) {
        u32 b = p[j];
        for (int k = 0; k < per; k++) {
            i64 i = j * per + k;
            if (i >= n) break;
            u32 c = (b >> (k * bits)) & mask;
            float scale = norms[i / bucket] / sf;
            float v = (float) (c & lmask) * scale;
            v = (c & sbit) ? -v : v;
            out[i] = add ? out[i] + v : v;
        }
    }
}

// ---------------------------------------------------------------------------- casts
extern "C" __global__ void copy_check(const float* __restrict__ x, float* __restrict__ dst, i64 n, int* flag) {
    int bad = 0;
    for (i64 i = HP_TID; i < n; i += HP_STRIDE) {
        float v = x[i];
        dst[i] = v;
        bad |= hp_bad(v);
    }
    if (bad) *flag = 1;
}

// float16 / bfloat16 read as bits: all exponent bits set (mask) is Inf or NaN
extern "C" __global__ void half_nonfinite(const u16* __restrict__ h, u32 mask, i64 n, int* flag) {
    int bad = 0;
    for (i64 i = HP_TID; i < n; i += HP_STRIDE) bad |= (((u32) h[i] & mask) == mask);
    if (bad) *flag = 1;
}
