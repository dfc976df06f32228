"""What each common data-centre and gaming card is rated at, for the preflight's "% of rated".

Dense (no structured sparsity) tensor-core TFLOP/s with FP32 accumulation, as PyTorch's matmul
runs them, and the memory bandwidth, from the vendor's own datasheets:
  A100   https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
         (BF16/FP16 312 dense, 624 with sparsity; 1,555 GB/s 40GB, 2,039 GB/s 80GB SXM, 1,935 PCIe)
  H100   https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
         (SXM: 1,979 with sparsity = 989 dense, 3.35 TB/s; PCIe: 1,513 = 756 dense, 2 TB/s; NVL 835 dense, 3.9 TB/s)
  H200   https://www.nvidia.com/en-us/data-center/h200/  (SXM 989 dense, 4.8 TB/s; NVL 835 dense)
  L40S   https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413  (362 dense, 733 sparse; 864 GB/s)
  4090   NVIDIA Ada Lovelace architecture whitepaper v1.01, appendix A table 2
         (FP16/BF16 tensor with FP32 accumulate 165.2 dense; 1,008 GB/s)
  3090   NVIDIA Ampere GA102 GPU architecture whitepaper v2.1, table 9
         (FP16/BF16 tensor with FP32 accumulate 71 dense; 936 GB/s)
  V100   https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
         (SXM2 125, PCIe 112 FP16 tensor; no BF16 tensor cores; 900 GB/s)
A measured figure below ``SLOW`` of these is worth a warning: a healthy card reaches 70-90 % of its
dense rate on a large square matmul.
"""

from typing import Optional

from remote.core.jsontypes import JSONObject

SLOW = 0.70
# (substring of nvidia-smi's name, lower case; first match wins) -> bf16, fp16 TFLOP/s, memory GB/s
RATED = [
    ("h200 nvl", 835.0, 835.0, 4800.0),
    ("h200", 989.0, 989.0, 4800.0),
    ("h100 nvl", 835.0, 835.0, 3900.0),
    ("h100 pcie", 756.0, 756.0, 2000.0),
    ("h100", 989.0, 989.0, 3350.0),
    ("a100 80gb pcie", 312.0, 312.0, 1935.0),
    ("a100-pcie", 312.0, 312.0, 1555.0),
    ("a100-sxm4-40gb", 312.0, 312.0, 1555.0),
    ("a100", 312.0, 312.0, 2039.0),
    ("l40s", 362.0, 362.0, 864.0),
    ("rtx 4090", 165.2, 165.2, 1008.0),
    ("rtx 3090", 71.0, 71.0, 936.0),
    ("v100-pcie", None, 112.0, 900.0),
    ("v100", None, 125.0, 900.0),
]


def rated(name: str) -> Optional[JSONObject]:
    """The card's rated figures by its name (``NVIDIA H100 80GB HBM3``), or None for one not in the table."""
    low = (name or "").lower()
    for key, bf16, fp16, mem in RATED:
        if key in low:
            return {"card": key, "bf16_tflops": bf16, "fp16_tflops": fp16, "mem_gbs": mem}
    return None
