"""Device profiles for the analytic cost model.

Numbers are vendor datasheet peaks (dense, no sparsity).  ``matmul_flops`` is the peak for matrix
multiply / convolution per dtype (float32 runs as TF32 on tensor cores, as in the MAGIS evaluation);
``vector_flops`` is the non-tensor-core peak used by elementwise and reduction ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_bytes: int
    matmul_flops: dict[str, float]  # dtype -> FLOP/s
    vector_flops: float  # FLOP/s
    mem_bandwidth: float  # bytes/s
    host_bandwidth: float  # bytes/s, one direction, device <-> pinned host memory
    launch_overhead: float  # s per kernel
    compute_efficiency: float = 0.75  # best fraction of peak FLOP/s a large kernel reaches
    memory_efficiency: float = 0.85  # best fraction of peak bandwidth
    half_time: float = 4e-6  # an op needing this long at peak runs at half efficiency
    view_overhead: float = 0.0  # s per view op (metadata only, no kernel): dispatch cost, ~0 on a GPU
    async_copies: bool = True  # swaps overlap compute (a GPU's copy engine); False: a copy blocks (a CPU)
    host_duplex_bandwidth: float = 0.0  # bytes/s of both directions together; 0: 20/12 of host_bandwidth
    notes: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    # calibrated per op: an op's name and kernel variant (``aten.convolution.default[Slow2d]``,
    # ``core.cost.variants``), its name, or ``category:<ops category>`` -> (launch seconds, factor on
    # the roofline time); ops with none of them use launch_overhead and 1
    op_fits: dict[str, tuple[float, float]] = field(default_factory=dict)

    def matmul_peak(self, dtype: str) -> float:
        return self.matmul_flops.get(dtype, self.matmul_flops.get("float32", self.vector_flops))

    def op_fit(self, op: str | None, category: str | None, variant: str | None = None) -> tuple[float, float]:
        """(launch seconds, roofline factor) of an op: its variant's calibrated pair, else its own,
        else its category's, else the profile's launch overhead and 1."""
        hit = fit_of(self.op_fits, op, category, variant)
        return hit if hit is not None else (self.launch_overhead, 1.0)

    def fits_variants(self, op: str | None) -> bool:
        """Whether a calibrated pair depends on ``op``'s kernel variant."""
        return bool(self.op_fits) and any(k.startswith(f"{op}[") for k in self.op_fits)


def fit_of(fits: dict[str, tuple[float, float]], op: str | None, category: str | None,
           variant: str | None = None) -> tuple[float, float] | None:
    """The calibrated (launch, factor) pair of an op in ``fits`` (``DeviceProfile.op_fits``): its
    variant's, else its own, else its category's; None when there is none."""
    if not fits:
        return None
    return ((fits.get(f"{op}[{variant}]") if variant else None) or fits.get(op or "")
            or fits.get(f"category:{category}"))


GB = 1024**3
T = 1e12

DEVICES: dict[str, DeviceProfile] = {
    "rtx3090": DeviceProfile(
        name="rtx3090", memory_bytes=24 * GB,
        matmul_flops={"float32": 35.6 * T, "float16": 71 * T, "bfloat16": 71 * T, "float64": 0.556 * T},
        vector_flops=35.6 * T, mem_bandwidth=936e9, host_bandwidth=22e9, launch_overhead=5e-6,
        notes="GeForce RTX 3090 (the MAGIS paper's GPU), PCIe 4.0 x16",
    ),
    "a100-80gb": DeviceProfile(
        name="a100-80gb", memory_bytes=80 * GB,
        matmul_flops={"float32": 156 * T, "float16": 312 * T, "bfloat16": 312 * T, "float64": 19.5 * T},
        vector_flops=19.5 * T, mem_bandwidth=2039e9, host_bandwidth=25e9, launch_overhead=4e-6,
        notes="A100 SXM4 80GB, PCIe 4.0 host link",
    ),
    "h100-sxm": DeviceProfile(
        name="h100-sxm", memory_bytes=80 * GB,
        matmul_flops={"float32": 494.7 * T, "float16": 989.4 * T, "bfloat16": 989.4 * T,
                      "float64": 66.9 * T},
        vector_flops=66.9 * T, mem_bandwidth=3350e9, host_bandwidth=50e9, launch_overhead=3e-6,
        notes="H100 SXM5 80GB, PCIe 5.0 host link",
    ),
    "v100-16gb": DeviceProfile(
        name="v100-16gb", memory_bytes=16 * GB,
        matmul_flops={"float32": 15.7 * T, "float16": 125 * T, "bfloat16": 125 * T, "float64": 7.8 * T},
        vector_flops=15.7 * T, mem_bandwidth=900e9, host_bandwidth=12e9, host_duplex_bandwidth=20e9,
        launch_overhead=5e-6,
        notes="V100 SXM2 16GB on PCIe 3.0 (SwapAdvisor's testbed: 12 GB/s one way, 20 GB/s both ways); "
              "float32 without tensor cores, as the paper's MXNet ran it",
    ),
    "cpu": DeviceProfile(
        name="cpu", memory_bytes=24 * GB,
        matmul_flops={"float32": 100e9, "bfloat16": 50e9, "float16": 25e9, "float64": 50e9},
        vector_flops=25e9, mem_bandwidth=15e9, host_bandwidth=15e9, launch_overhead=5e-6,
        compute_efficiency=0.6, memory_efficiency=0.6, half_time=20e-6, async_copies=False,
        notes="a generic 2-core x86 server CPU (rough; use --measured for real numbers)",
    ),
}

DEFAULT_PROFILE = "rtx3090"


def duplex_factor(p: DeviceProfile) -> float:
    """How much longer a copy takes while one runs the other way: one-way bandwidth over half the
    both-ways bandwidth (SwapAdvisor's testbed: 12 GB/s one way, 20 GB/s both ways -> 1.2)."""
    both = p.host_duplex_bandwidth or p.host_bandwidth * 20 / 12
    return max(1.0, 2 * p.host_bandwidth / both)


def profile_to_dict(p: DeviceProfile) -> dict:
    """A profile as plain JSON data (``profile_from_dict`` reads it back)."""
    return {f.name: getattr(p, f.name) for f in fields(DeviceProfile)}


def profile_from_dict(d: dict) -> DeviceProfile:
    """A profile from ``profile_to_dict``'s data (ValueError on missing or non-numeric fields)."""
    try:
        kw = {f.name: d[f.name] for f in fields(DeviceProfile) if f.name in d}
        kw["matmul_flops"] = {str(k): float(v) for k, v in kw["matmul_flops"].items()}
        for f in fields(DeviceProfile):
            if f.type == "float" and f.name in kw:
                kw[f.name] = float(kw[f.name])
        kw["extra"] = {str(k): float(v) for k, v in kw.get("extra", {}).items()}
        kw["op_fits"] = {str(k): (float(v[0]), float(v[1])) for k, v in kw.get("op_fits", {}).items()}
        return DeviceProfile(**kw)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"not a device profile: {type(e).__name__}: {e}") from None


def get_device(name: str) -> DeviceProfile:
    key = name.lower()
    if key not in DEVICES:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(DEVICES)}")
    return DEVICES[key]
