"""NCCL's own cost-model constants, as its tuner uses them to choose an algorithm and a protocol.

Source for every table: NVIDIA/nccl at commit 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL
2.30.7), file and lines given per table; docs/research/nccl_tuning.md explains them. These are
NCCL's calibration of its own kernels, not fitted here: no published end-to-end figure was used
to pick any of them. Units as NCCL's: latency in microseconds, bandwidth in GB/s (1e9 B/s).

Indexes: algorithms and protocols by name; the generation ("volta", "ampere", "hopper",
"blackwell") is tuning.cc's compCapIndex; "nodes" columns are tuning.cc's index2: 1 node,
2 nodes, 3 or more.
"""

from __future__ import annotations

TREE, RING, NVLS, NVLS_TREE, PAT = "tree", "ring", "nvls", "nvls_tree", "pat"
LL, LL128, SIMPLE = "LL", "LL128", "Simple"
PROTOCOL_ORDER = (LL, LL128, SIMPLE)
# NCCL's algorithm enum order (src/include/plugin/nccl_tuner.h lines 28-40, CollNet omitted):
# ties in predicted time keep the earlier one (enqueue.cc topoGetAlgoInfo takes a strict minimum).
ALGORITHM_ORDER = (TREE, RING, NVLS, NVLS_TREE, PAT)
NVLINK, PCI, NET = "nvlink", "pci", "net"

# ncclTunerConstantsDefaults.baseLatencies, tuning.cc lines 149-155 (us; LL, LL128, Simple).
BASE_LATENCY_US = {TREE: (6.8, 14.0, 8.4), RING: (6.6, 14.0, 8.4), NVLS: (0.0, 0.0, 0.0),
                   NVLS_TREE: (0.0, 0.0, 0.0), PAT: (8.0, 8.0, 8.0)}

# hwLatencies[link][algorithm], tuning.cc lines 156-176 (us per hop; LL, LL128, Simple).
HW_LATENCY_US = {
    NVLINK: {TREE: (0.6, 1.25, 4.0), RING: (0.6, 1.9, 3.4), NVLS: (0.0, 0.0, 25.0),
             NVLS_TREE: (0.0, 0.0, 25.0), PAT: (0.0, 0.0, 4.0)},
    PCI: {TREE: (1.0, 1.9, 4.0), RING: (1.0, 2.5, 5.7), NVLS: (0.0, 0.0, 0.0),
          NVLS_TREE: (0.0, 0.0, 0.0), PAT: (0.0, 0.0, 4.0)},
    NET: {TREE: (5.0, 8.5, 14.0), RING: (2.7, 4.0, 14.0), NVLS: (0.0, 0.0, 18.0),
          NVLS_TREE: (0.0, 0.0, 20.9), PAT: (0.0, 0.0, 14.0)},
}

# getNetOverhead, tuning.cc lines 225-233: 1 us on Intel (and other) x86 hosts, 2 us on AMD.
# Across nodes every intra-node step of a ring costs at least this (x3 for Simple): a floor.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
SIMPLE_NET_OVERHEAD_FACTOR = 3.0

# llMaxBws, tuning.cc lines 177-183 and 269-272 (GB/s, total): one node by generation; several
# nodes by the host's CPU vendor (Intel: the first row, AMD: the second; columns 1, 2, 3+ nodes).
LL_MAX_BW_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BW_NODES = {"intel": (39.0, 39.0, 20.4), "amd": (87.7, 22.5, 19.0)}

# Per-channel caps, tuning.cc lines 184-211 (GB/s; 1 node, 2 nodes, 3+ nodes).
PER_CH_MAX_RING_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7,) * 3,
                         "blackwell": (40.0,) * 3}
PER_CH_MAX_TREE_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3,
                         "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
PER_CH_MAX_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                   "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
PER_CH_MAX_NVLS_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                        "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}

# nvlsEfficiency, tuning.cc lines 138-144.
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}

# Protocol and algorithm refinements, tuning.cc lines 327-337.
RING_LL_FACTOR = 0.5           # LL moves 4 bytes of data with 4 bytes of flag
LL128_FACTOR = 0.92            # LL128: 120 of 128 bytes are data
TREE_AR_FACTOR = 0.92
TREE_LL_FACTOR = 1.0 / 3.8
TREE_LL128_ONE_NODE = 7.0 / 9.0
TREE_LL128_NODES = 120.0 / 128.0
PAT_FACTOR = 0.75

# treeCorrectionFactor[protocol][k], k = floor(log2(bytes / 64)), tuning.cc lines 620-646; Tree
# AllReduce's bandwidth is multiplied by it for k < 23 (64 B up to 512 MiB, line 640): the
# table's last column is never read for Tree.
TREE_CORRECTION = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
         1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
            .9, 1.0, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8,
             .9, .9, .9),
}
TREE_CORRECTION_END = 23
# "Plateau effect of ring" (tuning.cc lines 647-650): Ring Simple AllReduce across nodes, once
# bytes / (channels x ranks) >= 64, has its latency multiplied by this.
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}
RING_PLATEAU_MIN_BYTES = 64

# Per-link NVLink bandwidth NCCL assumes (GB/s, one direction; src/graph/topo.h lines 17-35,
# ncclTopoNVLinkBw): SM70 20.0, SM80 20.0, SM90 20.6, SM100 40.1; against the data sheets' 25,
# 25, 25 and 50 GB/s per link per direction (NVLink2-5).
NVLINK_PER_LINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
NVLINK_DATASHEET_PER_LINK_GBPS = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0,
                                  "blackwell": 50.0}
# PCIe x16 as NCCL rates it (topo.cc lines 545-557 and 656-657: width x per-lane value / 80):
# Gen3 12, Gen4 24, Gen5 48, Gen6 96 GB/s. A channel through a NIC is capped at it.
PCIE_X16_GBPS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}

# Per-channel speeds the topology search tries, highest first (src/graph/search.cc lines
# 1051-1065): inside one node, and across nodes; by generation (Hopper and Blackwell have
# their own ladders).
SPEEDS_INTRA = {"hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0,
                              18.0)}
SPEEDS_INTRA_DEFAULT = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = {"hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                           3.0, 2.4, 1.2, 0.24, 0.12),
                "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                              17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
SPEEDS_INTER_DEFAULT = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0,
                        5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
# The search lowers the speed while the next one is above this fraction of the best found
# (search.cc line 1245), and gives ring graphs at most MAXCHANNELS / 2 channels (init.cc line
# 1177; MAXCHANNELS = 64, src/include/device.h line 91).
SPEED_DROP_LIMIT = 0.49
MAX_RING_CHANNELS = 32
# ncclTopoDupChannels (search.cc lines 1036-1049): channels double (bandwidth halves) when a
# channel runs at >= 25 GB/s, except on Hopper and later below 50 GB/s with more than 4.
DUP_MIN_GBPS, DUP_MIN_GBPS_HOPPER, DUP_MAX_CHANNELS_SLOW = 25.0, 50.0, 4
# NVLS graphs have one channel (head) per GPU, at most NCCL_MAX_NVLS_ARITY = 32 (search.cc line
# 1127, device.h line 213); across nodes one per NIC (search.cc lines 754-772). A head's GPU is
# charged its speed twice on its NVSwitch links (search.cc lines 416 and 424).
MAX_NVLS_HEADS = 32
# After the search, NCCL runs twice the ring graph's channels (connect.cc line 460, at most 64),
# and on Hopper and later across nodes twice again when a channel runs above 45 GB/s and fewer
# than 16 are set up (lines 480-483). The ring's plateau counts these.
COMM_CHANNELS_MAX, HOPPER_MORE_CHANNELS_GBPS, HOPPER_MORE_CHANNELS_BELOW = 64, 45.0, 16


# Buffers NCCL allocates per connection to a peer (src/init.cc lines 810-824): LL
# 8 lines x 512 threads x 8 steps x 16 bytes = 512 KiB, LL128 120 x 640 x 8 x 8 bytes = 4.69 MiB,
# Simple 4 MiB (device.h lines 26, 97-98, 114-115).
CONNECTION_BUFFER_BYTES = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + (1 << 22)
# Receiving connections per channel: the ring's previous rank; across nodes also the tree's
# parent and two children (NCCL connects trees only where it may use them).
RING_PEERS, TREE_PEERS = 1, 3


def nodes_index(nodes: int) -> int:
    """tuning.cc's index2: 0 for one node, 1 for two, 2 for three or more."""
    return min(nodes, 3) - 1


def protocol_index(protocol: str) -> int:
    return PROTOCOL_ORDER.index(protocol)
