"""A cluster as the simulator sees it: nodes of GPUs joined by a network.

``network_gbps`` is the nominal link rate from the cluster description; what a system gets out of it
is ``network_gbps * net_efficiency`` (a calibration parameter, see :mod:`hipress.sim.params`).
The intra-node figures are not in sosp21.json; they are the hardware's data-sheet class, written
here so a reader can see and change them: NVLink on the aws p3dn (V100 SXM2) nodes, PCIe 3.0 x16
between the two 1080 Ti of a local node.

``transport`` comes from the reference's ``network`` field (``"RDMA"`` on the local cluster; a
cluster that names none is taken to be TCP, as the aws p3dn's ENA is). It matters to BytePS: over
TCP every pushed and pulled byte crosses the host's ZMQ/kernel socket path, over RDMA (ps-lite's
RDMA van) the NIC moves registered host memory itself and only the server's summation is CPU work.

The hosts' CPU speed is not here: each cluster's BytePS host rates are fitted on that cluster's own
baseline curves (:mod:`hipress.sim.calibrate`), so no cluster borrows another's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .reference import Reference

#: Per-GPU-model intra-node all-reduce bus bandwidth (GB/s), host<->GPU copy rate (GB/s), and whether
#: the node's GPUs reach each other peer to peer (``p2p``, 1 or 0). The p3dn's V100s do, over NVLink,
#: by DMA. The local nodes' two GeForce 1080 Ti sit on PCIe with no peer path between them (GeForce
#: boards, one per CPU socket: across the sockets' interconnect): NCCL moves their bytes through host
#: memory with its kernels, which hold the SMs for as long as the PCIe transfer takes, so backward
#: and NCCL's intra-node collectives take turns (see :mod:`hipress.sim.systems.base`).
INTRA_NODE = {
    "V100": {"intra_gbytes": 100.0, "pcie_gbytes": 12.0, "p2p": 1},
    "1080Ti": {"intra_gbytes": 10.0, "pcie_gbytes": 10.0, "p2p": 0},
}
_DEFAULT_INTRA = {"intra_gbytes": 10.0, "pcie_gbytes": 10.0, "p2p": 0}


@dataclass(frozen=True)
class Cluster:
    """Hardware of one cluster; ``layout(gpus)`` says how a job of that size sits on it."""

    name: str
    nodes: int
    gpus_per_node: int
    gpu: str
    network_gbps: float
    intra_gbytes: float
    pcie_gbytes: float
    gpu_counts: tuple[int, ...] = ()
    transport: str = "tcp"
    #: the node's GPUs reach each other peer to peer (NVLink); else through host memory
    intra_p2p: bool = True

    def layout(self, gpus: int) -> Layout:
        """Fill whole nodes first: 8 GPUs on a p3dn cluster is one node, 16 is two."""
        if gpus < 1:
            raise ValueError(f"cluster {self.name}: need at least one GPU, got {gpus}")
        if gpus <= self.gpus_per_node:
            return Layout(nodes=1, gpus_per_node=gpus)
        if gpus % self.gpus_per_node:
            raise ValueError(
                f"cluster {self.name}: {gpus} GPUs do not fill whole nodes of {self.gpus_per_node}; "
                f"use a multiple of {self.gpus_per_node}"
            )
        nodes = gpus // self.gpus_per_node
        if nodes > self.nodes:
            raise ValueError(f"cluster {self.name} has {self.nodes} nodes; {gpus} GPUs need {nodes}")
        return Layout(nodes=nodes, gpus_per_node=self.gpus_per_node)

    def with_network(self, gbps: float) -> Cluster:
        return replace(self, network_gbps=float(gbps))


@dataclass(frozen=True)
class Layout:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def cluster_from_reference(ref: Reference, name: str) -> Cluster:
    if name not in ref.clusters:
        raise ValueError(f"unknown cluster {name!r}; the reference has {', '.join(ref.clusters)}")
    c = ref.clusters[name]
    hw = INTRA_NODE.get(c.get("gpu", ""), _DEFAULT_INTRA)
    return Cluster(
        name=name,
        nodes=int(c["nodes"]),
        gpus_per_node=int(c["gpus_per_node"]),
        gpu=str(c.get("gpu", "?")),
        network_gbps=float(c["network_gbps"]),
        intra_gbytes=hw["intra_gbytes"],
        pcie_gbytes=hw["pcie_gbytes"],
        gpu_counts=tuple(int(x) for x in c["gpu_counts"]),
        transport="rdma" if str(c.get("network", "TCP")).upper() == "RDMA" else "tcp",
        intra_p2p=bool(hw["p2p"]),
    )

