"""U-GAT-IT (Kim et al. 2020) as its official PyTorch code builds it (znxlwm/UGATIT-pytorch).

Two generators (A->B, B->A) and four discriminators (global and local, per domain), full mode:
the generator's first fully-connected layer takes the whole (input/4)^2 x 256 feature map, so the
parameter count grows with the image size: 670 M parameters (2558 MiB, 148 gradients) at 256x256,
the setting HiPress trained. At a CPU-feasible size the model is smaller, and ``hipress run`` says so.

One training iteration here runs the discriminator loss (on detached fakes) and the generator loss
(adversarial, cycle, identity and CAM terms with the official weights 1/10/10/1000) and back-propagates
their sum once. That produces a gradient for every parameter of all six networks, i.e. the
synchronization work of one U-GAT-IT iteration; it is not the alternating D/G update of the
original, so use it to measure throughput, not to train a translation model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm

from .registry import BadModelOption, Batch, ModelSpec, register


class ResnetBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False), nn.InstanceNorm2d(dim), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False), nn.InstanceNorm2d(dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


def _instance_layer_mix(x: torch.Tensor, rho: torch.Tensor, eps: float) -> torch.Tensor:
    in_mean, in_var = x.mean(dim=[2, 3], keepdim=True), x.var(dim=[2, 3], keepdim=True)
    ln_mean, ln_var = x.mean(dim=[1, 2, 3], keepdim=True), x.var(dim=[1, 2, 3], keepdim=True)
    out_in = (x - in_mean) / torch.sqrt(in_var + eps)
    out_ln = (x - ln_mean) / torch.sqrt(ln_var + eps)
    r = rho.expand(x.shape[0], -1, -1, -1)
    return r * out_in + (1 - r) * out_ln


class AdaILN(nn.Module):
    """Adaptive layer-instance normalization: gamma and beta come from the generator's FC branch."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.rho = nn.Parameter(torch.full((1, num_features, 1, 1), 0.9))

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        out = _instance_layer_mix(x, self.rho, self.eps)
        return out * gamma.unsqueeze(2).unsqueeze(3) + beta.unsqueeze(2).unsqueeze(3)


class ILN(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.rho = nn.Parameter(torch.zeros(1, num_features, 1, 1))
        self.gamma = nn.Parameter(torch.ones(1, num_features, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, num_features, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _instance_layer_mix(x, self.rho, self.eps) * self.gamma + self.beta


class ResnetAdaILNBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.pad1, self.conv1, self.norm1 = nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False), AdaILN(dim)
        self.pad2, self.conv2, self.norm2 = nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=False), AdaILN(dim)

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(self.pad1(x)), gamma, beta))
        out = self.norm2(self.conv2(self.pad2(out)), gamma, beta)
        return out + x


class ResnetGenerator(nn.Module):
    def __init__(self, ngf: int = 64, n_blocks: int = 4, img_size: int = 256, light: bool = False) -> None:
        super().__init__()
        self.light = light
        down: list[nn.Module] = [
            nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7, bias=False), nn.InstanceNorm2d(ngf), nn.ReLU(True)
        ]
        for i in range(2):
            m = 2**i
            down += [nn.ReflectionPad2d(1), nn.Conv2d(ngf * m, ngf * m * 2, 3, stride=2, bias=False),
                     nn.InstanceNorm2d(ngf * m * 2), nn.ReLU(True)]
        mult = 4
        down += [ResnetBlock(ngf * mult) for _ in range(n_blocks)]
        self.DownBlock = nn.Sequential(*down)
        self.gap_fc = nn.Linear(ngf * mult, 1, bias=False)
        self.gmp_fc = nn.Linear(ngf * mult, 1, bias=False)
        self.conv1x1 = nn.Conv2d(ngf * mult * 2, ngf * mult, 1)
        fc_in = ngf * mult if light else (img_size // mult) * (img_size // mult) * ngf * mult
        self.FC = nn.Sequential(nn.Linear(fc_in, ngf * mult, bias=False), nn.ReLU(True),
                                nn.Linear(ngf * mult, ngf * mult, bias=False), nn.ReLU(True))
        self.gamma = nn.Linear(ngf * mult, ngf * mult, bias=False)
        self.beta = nn.Linear(ngf * mult, ngf * mult, bias=False)
        self.UpBlock1 = nn.ModuleList(ResnetAdaILNBlock(ngf * mult) for _ in range(n_blocks))
        up: list[nn.Module] = []
        for i in range(2):
            m = 2 ** (2 - i)
            up += [nn.Upsample(scale_factor=2, mode="nearest"), nn.ReflectionPad2d(1),
                   nn.Conv2d(ngf * m, ngf * m // 2, 3, bias=False), ILN(ngf * m // 2), nn.ReLU(True)]
        up += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7, bias=False), nn.Tanh()]
        self.UpBlock2 = nn.Sequential(*up)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The translated image and the class-activation-map logits."""
        x = self.DownBlock(x)
        x, cam_logit = _cam(x, self.gap_fc, self.gmp_fc)
        x = F.relu(self.conv1x1(x))
        x_ = F.adaptive_avg_pool2d(x, 1) if self.light else x
        x_ = self.FC(x_.flatten(1))
        gamma, beta = self.gamma(x_), self.beta(x_)
        for block in self.UpBlock1:
            x = block(x, gamma, beta)
        return self.UpBlock2(x), cam_logit


def _cam(x: torch.Tensor, gap_fc: nn.Module, gmp_fc: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Class activation map: weight the features by the global avg/max-pool classifiers' weights."""
    gap_logit = gap_fc(F.adaptive_avg_pool2d(x, 1).flatten(1))
    gmp_logit = gmp_fc(F.adaptive_max_pool2d(x, 1).flatten(1))
    gap = x * gap_fc.weight.unsqueeze(2).unsqueeze(3)
    gmp = x * gmp_fc.weight.unsqueeze(2).unsqueeze(3)
    return torch.cat([gap, gmp], 1), torch.cat([gap_logit, gmp_logit], 1)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 64, n_layers: int = 5) -> None:
        super().__init__()
        model: list[nn.Module] = [nn.ReflectionPad2d(1), spectral_norm(nn.Conv2d(3, ndf, 4, stride=2)),
                                  nn.LeakyReLU(0.2, True)]
        for i in range(1, n_layers - 2):
            m = 2 ** (i - 1)
            model += [nn.ReflectionPad2d(1), spectral_norm(nn.Conv2d(ndf * m, ndf * m * 2, 4, stride=2)),
                      nn.LeakyReLU(0.2, True)]
        m = 2 ** (n_layers - 2 - 1)
        model += [nn.ReflectionPad2d(1), spectral_norm(nn.Conv2d(ndf * m, ndf * m * 2, 4, stride=1)),
                  nn.LeakyReLU(0.2, True)]
        m = 2 ** (n_layers - 2)
        self.model = nn.Sequential(*model)
        self.gap_fc = spectral_norm(nn.Linear(ndf * m, 1, bias=False))
        self.gmp_fc = spectral_norm(nn.Linear(ndf * m, 1, bias=False))
        self.conv1x1 = nn.Conv2d(ndf * m * 2, ndf * m, 1)
        self.pad = nn.ReflectionPad2d(1)
        self.conv = spectral_norm(nn.Conv2d(ndf * m, 1, 4, bias=False))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, cam_logit = _cam(self.model(x), self.gap_fc, self.gmp_fc)
        x = F.leaky_relu(self.conv1x1(x), 0.2)
        return self.conv(self.pad(x)), cam_logit


class UGATIT(nn.Module):
    """The six networks of one U-GAT-IT model, in the official code's order."""

    def __init__(self, img_size: int = 256, light: bool = False) -> None:
        super().__init__()
        self.genA2B = ResnetGenerator(img_size=img_size, light=light)
        self.genB2A = ResnetGenerator(img_size=img_size, light=light)
        self.disGA = Discriminator(n_layers=7)
        self.disGB = Discriminator(n_layers=7)
        self.disLA = Discriminator(n_layers=5)
        self.disLB = Discriminator(n_layers=5)


def ugatit_batch(batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None) -> Batch:
    """One random image of each domain per sample, in tanh's range."""
    s = opts["input_size"]
    a = torch.rand(batch_size, 3, s, s, device=device, generator=gen) * 2 - 1
    b = torch.rand(batch_size, 3, s, s, device=device, generator=gen) * 2 - 1
    return a, b


def _mse(x: torch.Tensor, target: float) -> torch.Tensor:
    return F.mse_loss(x, torch.full_like(x, target))


def _bce(x: torch.Tensor, target: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(x, torch.full_like(x, target))


def ugatit_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Discriminator loss on detached fakes plus the generator loss, summed (see the module docstring)."""
    m: UGATIT = model  # type: ignore[assignment]
    real_a, real_b = batch
    fake_a2b, cam_a2b = m.genA2B(real_a)
    fake_b2a, cam_b2a = m.genB2A(real_b)
    d_loss = torch.zeros((), device=real_a.device)
    g_loss = torch.zeros((), device=real_a.device)
    for dis, real, fake in ((m.disGA, real_a, fake_b2a), (m.disLA, real_a, fake_b2a),
                            (m.disGB, real_b, fake_a2b), (m.disLB, real_b, fake_a2b)):
        r_logit, r_cam = dis(real)
        f_logit, f_cam = dis(fake.detach())
        d_loss = d_loss + _mse(r_logit, 1) + _mse(r_cam, 1) + _mse(f_logit, 0) + _mse(f_cam, 0)
        g_logit, g_cam = dis(fake)
        g_loss = g_loss + _mse(g_logit, 1) + _mse(g_cam, 1)
    rec_a, _ = m.genB2A(fake_a2b)
    rec_b, _ = m.genA2B(fake_b2a)
    id_a, cam_a2a = m.genB2A(real_a)
    id_b, cam_b2b = m.genA2B(real_b)
    g_loss = g_loss + 10 * (F.l1_loss(rec_a, real_a) + F.l1_loss(rec_b, real_b))
    g_loss = g_loss + 10 * (F.l1_loss(id_a, real_a) + F.l1_loss(id_b, real_b))
    cam = _bce(cam_b2a, 1) + _bce(cam_a2a, 0) + _bce(cam_a2b, 1) + _bce(cam_b2b, 0)
    return d_loss + g_loss + 1000 * cam


def _check_ugatit(opts: dict[str, int]) -> None:
    s = opts["input_size"]
    if s < 96 or s % 4:
        raise BadModelOption(
            f"model 'ugatit': input_size {s} is not usable; it must be a multiple of 4 and at least 96 "
            f"(the 7-layer global discriminator downsamples 32x)"
        )


register(ModelSpec(
    name="ugatit",
    summary="U-GAT-IT (full): 2 generators + 4 discriminators, 670 M parameters at 256x256, 148 gradients",
    unit="images",
    paper={"input_size": 256, "batch_size": 1},
    cpu={"input_size": 96, "batch_size": 1},
    factory=lambda input_size=256: UGATIT(img_size=input_size),
    make_batch=ugatit_batch,
    loss=ugatit_loss,
    build_opts=("input_size",),
    check=_check_ugatit,
    notes="parameters grow with input_size (the generators' first FC layer takes the whole feature map)",
))
