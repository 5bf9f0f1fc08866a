"""Every GPU record of the hardware catalogue against its data sheet, and the measured constants
of its op model against the figures their sources publish. The figures are typed in here from
the sources, so a record that drifts from its data sheet fails (not compared with itself).

Sources: [DS-V] NVIDIA V100 data sheet (SXM2 column) and Volta whitepaper Table 1; [WP-A] A100
whitepaper Table 3 (SXM4 40GB); [DS-A] A100 data sheet (80GB SXM); [WP-H] H100 whitepaper v1.04
Table 3 (SXM5); [DS-H] nvidia.com H200 spec table; NVLink per GPU: 6 x 25 GB/s each way
(NVLink2), 12 x 25 (NVLink3), 18 x 25 (NVLink4); NICs: DGX-2 8 x 100 Gb/s EDR, DGX A100 8 x 200
Gb/s HDR, DGX H100 8 x 400 Gb/s NDR (the DGX user guides)."""

import pytest

from zerosim.hardware.gpus import GPUS

# name: (dense 16-bit TFLOP/s, FP32 TFLOP/s, HBM GB/s, HBM GiB, SMs, L2 MiB)
DATA_SHEETS = {
    "V100-16GB": (125.0, 15.7, 900.0, 16.0, 80, 6.0),        # [DS-V]: the same SXM2 part
    "V100-32GB": (125.0, 15.7, 900.0, 32.0, 80, 6.0),        # [DS-V]: 6144 KB of L2
    "A100-40GB": (312.0, 19.5, 1555.0, 40.0, 108, 40.0),     # [WP-A]: 312 dense / 624 sparse
    "A100-80GB": (312.0, 19.5, 2039.0, 80.0, 108, 40.0),     # [DS-A] SXM: 2,039 GB/s
    "H100-80GB": (989.4, 66.9, 3350.0, round(81559 / 1024, 2), 132, 50.0),  # [WP-H]: 989.4 /
    # 1978.9 sparse; nvidia-smi's 81559 MiB (NVIDIA/nccl#1264: 80 GB marketed, 79.65 GiB)
    "H200-141GB": (989.5, 67.0, 4800.0, round(143771 / 1024, 1), 132, 50.0),  # [DS-H]: 1,979
    # sparse / 2; nvidia-smi's 143771 MiB (141 GB marketed is not decimal GB)
    "B200-180GB": (4500 / 2, 75.0, 7700.0, round(183359 / 1024, 2), 148, None),  # Blackwell data
    "GB200-186GB": (5000 / 2, 80.0, 8000.0, round(189471 / 1024, 2), 148, None),  # sheet p. 8
}
# name: (NVLink GB/s one way per GPU, NICs per node, GB/s per NIC, PCIe generation)
NODES = {
    "V100-16GB": (6 * 25.0, 4, 100 / 8, 3),    # DGX-1 (V100): hybrid cube-mesh, 4 x EDR
    "V100-32GB": (6 * 25.0, 8, 100 / 8, 3),    # DGX-2, the ZeRO paper's cluster
    "A100-40GB": (12 * 25.0, 8, 200 / 8, 4),   # DGX A100
    "A100-80GB": (12 * 25.0, 8, 200 / 8, 4),
    "H100-80GB": (18 * 25.0, 8, 400 / 8, 5),   # DGX H100
    "H200-141GB": (18 * 25.0, 8, 400 / 8, 5),  # the same NVLink4, NICs and host as DGX H100
    "B200-180GB": (18 * 50.0, 8, 400 / 8, 5),  # DGX B200: NVLink 5 (18 x 50), 8 x ConnectX-7
    "GB200-186GB": (18 * 50.0, 72, 400 / 8, 5),  # one 72-GPU NVLink domain, a NIC per GPU
}


def test_the_catalogue_holds_these_gpus():
    assert set(GPUS) == set(DATA_SHEETS)


@pytest.mark.parametrize("name", sorted(DATA_SHEETS))
def test_gpu_against_its_data_sheet(name):
    gpu = GPUS[name]
    assert (gpu.peak_dense_16bit_tflops, gpu.peak_fp32_tflops, gpu.hbm_GBps, gpu.hbm_GiB,
            gpu.sm_count, gpu.l2_MiB) == DATA_SHEETS[name]
    node = gpu.node
    assert (node.intra_node_GBps, node.nics, node.nic_GBps, node.pcie_gen) == NODES[name]


# Achievable fractions, from the measurements the records cite, rounded to 3 places:
# HBM: RRZE-HPC/gpu-benches @ 1038c5d gpu-stream SCALE (GB/s) over the data sheet; H200 from
# gpu-small-kernels/h200.txt's largest SCALE size; H100 from our copy of 1 GiB
# (profiles/h100/microbench_2026-11-24.json). GEMM: Markidis et al. 2018 (83 of 112.7 TFLOP/s
# on V100, CUDA 9) superseded by Baidu DeepBench's DGX-1 V100 FP16 sheet (112.3 of 125 on CUDA
# 10.1, 4096 x 7000 x 4096), Bekman's ml-engineering MAMF table (A100 SXM 271.2, H100 SXM 794.5
# of the peaks).
HBM_FRACTION = {"V100-16GB": 809 / 900, "V100-32GB": 809 / 900, "A100-40GB": 1382 / 1555,
                "A100-80GB": 1737 / 2039,
                "H100-80GB": 3009 / 3350, "H200-141GB": 3282 / 4800,
                "B200-180GB": 3009 / 3350, "GB200-186GB": 3009 / 3350}  # proxies: the H100's
GEMM_FRACTION = {"V100-16GB": 112.3 / 125, "V100-32GB": 112.3 / 125, "A100-40GB": 271.2 / 312,
                 "A100-80GB": 271.2 / 312,
                 "H100-80GB": 794.5 / 989.4, "H200-141GB": 794.5 / 989.4,
                 "B200-180GB": 1745 / 2250, "GB200-186GB": 1822 / 2500}  # MAMF, Blackwell rows
# RRZE gpu-small-kernels, repeated-stream.svg: a = 2555 ns (A100_80), 2433 ns (H200); A100-40GB
# and H100 take those as proxies; V100: clpeak's kernel latency on a V100-SXM2-16GB, 7.22 us.
LAUNCH_US = {"V100-16GB": 7.22, "V100-32GB": 7.22, "A100-40GB": 2.555, "A100-80GB": 2.555,
             "H100-80GB": 2.433,
             "H200-141GB": 2.433, "B200-180GB": 2.433, "GB200-186GB": 2.433}  # proxies: H200's
# FlashAttention-2 (Dao 2023): A100 forward up to 230 TFLOP/s (§4), backward up to 63% of 312
# (§1); H100 FA2 at 16k, head dim 128 (FA3 paper Fig. 5(c) and 6(b)): 370 and 322. No flash on
# Volta (the flash-attention README: Ampere or later).
FLASH = {"V100-16GB": (None, None), "V100-32GB": (None, None),
         "A100-40GB": (230.0, round(0.63 * 312, 1)),
         "A100-80GB": (230.0, round(0.63 * 312, 1)), "H100-80GB": (370.0, 322.0),
         "H200-141GB": (370.0, 322.0), "B200-180GB": (370.0, 322.0),  # proxies: the H100's
         "GB200-186GB": (370.0, 322.0)}


@pytest.mark.parametrize("name", sorted(DATA_SHEETS))
def test_op_model_constants_are_their_sources_figures(name):
    model = GPUS[name].op_model
    assert model.hbm_achievable_fraction == round(HBM_FRACTION[name], 3)
    assert model.gemm_achievable_fraction == round(GEMM_FRACTION[name], 3)
    assert model.kernel_launch_us == LAUNCH_US[name]
    assert (model.flash_fwd_tflops, model.flash_bwd_tflops) == FLASH[name]


# FlashAttention-2 forward + backward, causal, head dim 128, TFLOP/s at 512 .. 16k tokens, bars
# of FA2's Fig. 4(d) (A100 80GB) and Fig. 7(d) (H100 SXM5) as the flash-attention README's
# images at 0251105 show them.
FA2_CAUSAL = {
    "A100": ((512, 99.0), (1024, 133.0), (2048, 155.0), (4096, 173.0), (8192, 182.0),
             (16384, 189.0)),
    "H100": ((512, 163.0), (1024, 221.0), (2048, 265.0), (4096, 294.0), (8192, 308.0),
             (16384, 328.0)),
}
FA1_CAUSAL_H100 = ((512, 98.0), (1024, 109.0), (2048, 108.0), (4096, 126.0), (8192, 135.0),
                   (16384, 137.0))


@pytest.mark.parametrize("name, curve", [("A100-40GB", "A100"), ("A100-80GB", "A100"),
                                         ("H100-80GB", "H100"), ("H200-141GB", "H100"),
                                         ("B200-180GB", "H100"), ("GB200-186GB", "H100")])
def test_flash_causal_curves_are_the_published_bars(name, curve):
    model = GPUS[name].op_model
    assert tuple(model.flash_causal_by_seq) == FA2_CAUSAL[curve]
    if curve == "H100":
        assert tuple(dict(model.older_flash_causal_by_seq)["fa1"]) == FA1_CAUSAL_H100
