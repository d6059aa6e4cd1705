"""BERT-base, the Transformer (base) and the LSTM language model.

Sizes follow what HiPress trained (its Table 3: BERT-base 420 MiB in 207 gradients, Transformer
234 MiB in 185, LSTM 327 MiB in 10):

- BERT-base (Devlin et al. 2019) with its pre-training heads (masked LM tied to the word embeddings,
  next-sentence prediction), vocabulary 30522.
- Transformer base (Vaswani et al. 2017) as tensor2tensor builds it for WMT En-De: pre-norm layers,
  attention projections without biases, one embedding shared by source, target and softmax,
  vocabulary 33708: 185 gradients, 61.3 M parameters.
- The LSTM is PyTorch's word-language-model example at its large setting (2 layers of 1500 units,
  tied embedding, WikiText-2 vocabulary 33278): 10 gradients, 86 M parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .registry import Batch, ModelSpec, register

# ----------------------------------------------------------------------------------------- BERT


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, ff)
        self.output = nn.Linear(ff, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, h // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        a = a.transpose(1, 2).reshape(b, n, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(a)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(y))


class Bert(nn.Module):
    """BERT encoder with the masked-LM and next-sentence heads of pre-training."""

    def __init__(
        self, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12, ff: int = 3072,
        max_positions: int = 512, dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ff, dropout) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.mlm_transform = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.nsp = nn.Linear(hidden, 2)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(
        self, ids: torch.Tensor, types: torch.Tensor, mlm_positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked-LM logits at ``mlm_positions`` (B, P, vocab) and next-sentence logits (B, 2)."""
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(types)
        x = self.dropout(self.embed_norm(x))
        for layer in self.layers:
            x = layer(x)
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        picked = torch.gather(x, 1, mlm_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        t = self.mlm_norm(F.gelu(self.mlm_transform(picked)))
        mlm = F.linear(t, self.word_embeddings.weight, self.mlm_bias)
        return mlm, nsp


def _masked(seq_len: int) -> int:
    return max(1, round(0.15 * seq_len))


def bert_batch(batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None) -> Batch:
    """Random token ids, two segments, 15% of positions to predict, random next-sentence labels."""
    n = opts["seq_len"]
    ids = torch.randint(0, 30522, (batch_size, n), device=device, generator=gen)
    types = (torch.arange(n, device=device) >= n // 2).long().expand(batch_size, n)
    positions = torch.rand(batch_size, n, device=device, generator=gen).argsort(dim=1)[:, : _masked(n)]
    labels = torch.randint(0, 30522, (batch_size, _masked(n)), device=device, generator=gen)
    nsp = torch.randint(0, 2, (batch_size,), device=device, generator=gen)
    return ids, types, positions, labels, nsp


def bert_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    ids, types, positions, labels, nsp_labels = batch
    mlm, nsp = model(ids, types, positions)
    return F.cross_entropy(mlm.flatten(0, 1), labels.flatten()) + F.cross_entropy(nsp, nsp_labels)


def _check_bert(opts: dict[str, int]) -> None:
    from .registry import BadModelOption

    if opts["seq_len"] > 512:
        raise BadModelOption(f"model 'bert': seq_len {opts['seq_len']} exceeds BERT's 512 positions")


register(ModelSpec(
    name="bert",
    summary="BERT-base with pre-training heads: 110 M parameters, 206 gradients",
    unit="sequences",
    paper={"seq_len": 128, "batch_size": 32},
    cpu={"seq_len": 32, "batch_size": 2},
    factory=lambda: Bert(),
    make_batch=bert_batch,
    loss=bert_loss,
    check=_check_bert,
))

# ---------------------------------------------------------------------------------- Transformer


class Attention(nn.Module):
    """Multi-head attention with tensor2tensor's bias-free q, k, v and output projections."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, mem: torch.Tensor, causal: bool = False) -> torch.Tensor:
        b, n, d = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, -1, self.heads, d // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(mem)), split(self.v(mem)), is_causal=causal)
        return self.o(a.transpose(1, 2).reshape(b, n, d))


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.self_norm, self.self_attn = nn.LayerNorm(d), Attention(d, heads)
        self.ff_norm, self.ff = nn.LayerNorm(d), FeedForward(d, ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.self_norm(x)
        x = x + self.dropout(self.self_attn(h, h))
        return x + self.dropout(self.ff(self.ff_norm(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.self_norm, self.self_attn = nn.LayerNorm(d), Attention(d, heads)
        self.cross_norm, self.cross_attn = nn.LayerNorm(d), Attention(d, heads)
        self.ff_norm, self.ff = nn.LayerNorm(d), FeedForward(d, ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        h = self.self_norm(x)
        x = x + self.dropout(self.self_attn(h, h, causal=True))
        x = x + self.dropout(self.cross_attn(self.cross_norm(x), mem))
        return x + self.dropout(self.ff(self.ff_norm(x)))


class Transformer(nn.Module):
    """Encoder-decoder Transformer, tensor2tensor's ``transformer_base`` layout."""

    def __init__(
        self, vocab: int = 33708, d: int = 512, layers: int = 6, heads: int = 8, ff: int = 2048, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.d = d
        self.embedding = nn.Embedding(vocab, d)
        nn.init.normal_(self.embedding.weight, 0.0, d**-0.5)
        self.encoder = nn.ModuleList(EncoderLayer(d, heads, ff, dropout) for _ in range(layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(DecoderLayer(d, heads, ff, dropout) for _ in range(layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        pos = torch.arange(n, device=tokens.device, dtype=torch.float32).unsqueeze(1)
        even = torch.arange(0, self.d, 2, device=tokens.device, dtype=torch.float32)
        div = torch.exp(even * (-math.log(1e4) / self.d))
        pe = torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=1)
        return self.dropout(self.embedding(tokens) * self.d**0.5 + pe)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mem = self._embed(src)
        for layer in self.encoder:
            mem = layer(mem)
        mem = self.encoder_norm(mem)
        x = self._embed(tgt)
        for layer in self.decoder:
            x = layer(x, mem)
        return F.linear(self.decoder_norm(x), self.embedding.weight)


def translation_batch(
    batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None
) -> Batch:
    """Random source and target sentences of ``seq_len`` tokens (target shifted by one for teacher forcing)."""
    n = opts["seq_len"]
    src = torch.randint(1, 33708, (batch_size, n), device=device, generator=gen)
    tgt = torch.randint(1, 33708, (batch_size, n + 1), device=device, generator=gen)
    return src, tgt[:, :-1], tgt[:, 1:]


def translation_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    src, tgt_in, tgt_out = batch
    logits = model(src, tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=0.1)


register(ModelSpec(
    name="transformer",
    summary="Transformer base (tensor2tensor, WMT En-De vocabulary): 61.3 M parameters, 185 gradients",
    unit="tokens",
    paper={"seq_len": 128, "batch_size": 32},
    cpu={"seq_len": 32, "batch_size": 4},
    factory=lambda: Transformer(),
    make_batch=translation_batch,
    loss=translation_loss,
    units=lambda opts: opts["seq_len"],
    notes="throughput counts target tokens (batch x seq_len)",
))

# ----------------------------------------------------------------------------------------- LSTM


class LSTMLanguageModel(nn.Module):
    """PyTorch's word_language_model (``--model LSTM --emsize 1500 --nhid 1500 --tied``)."""

    def __init__(self, vocab: int = 33278, size: int = 1500, layers: int = 2, dropout: float = 0.65) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, size)
        self.rnn = nn.LSTM(size, size, layers, dropout=dropout)
        self.decoder = nn.Linear(size, vocab)
        self.decoder.weight = self.encoder.weight  # tied: one gradient for both
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.drop(self.encoder(tokens)))
        return self.decoder(self.drop(out))


def lm_batch(batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None) -> Batch:
    """Random token streams laid out (seq_len, batch) as the example does, targets shifted by one."""
    n = opts["seq_len"]
    data = torch.randint(0, 33278, (n + 1, batch_size), device=device, generator=gen)
    return data[:-1], data[1:]


def lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


register(ModelSpec(
    name="lstm",
    summary="2-layer LSTM language model, 1500 units, tied embedding (WikiText-2): 86 M parameters, 10 gradients",
    unit="sequences",
    paper={"seq_len": 35, "batch_size": 20},
    cpu={"seq_len": 35, "batch_size": 4},
    factory=lambda: LSTMLanguageModel(),
    make_batch=lm_batch,
    loss=lm_loss,
))
