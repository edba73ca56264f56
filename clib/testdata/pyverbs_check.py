"""pyverbs_check DEVICE GID_INDEX: rdma-core's Python bindings (Debian's
python3-pyverbs) over softrdma's libibverbs.so.1.

Lists the devices, opens DEVICE, queries it, its port and a GID, and
allocates a PD, an MR, a CQ and an RC QP; steps the QP through INIT, RTR
and RTS connected to itself, moves a buffer with an RDMA WRITE, polls the
completion and checks the bytes. Prints PASS or raises.

Run: LD_LIBRARY_PATH=DIR /usr/bin/python3 pyverbs_check.py softrdma_lo 1
(clib/test.sh does, when pyverbs is installed).
"""
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def main():
    name, gid_index = sys.argv[1], int(sys.argv[2])
    names = [x.name.decode() for x in d.get_device_list()]
    if name not in names:
        raise SystemExit(f"FAIL {name} not in the device list {names}")
    with d.Context(name=name) as ctx:
        attr = ctx.query_device()
        if attr.max_qp < 1:
            raise SystemExit(f"FAIL max_qp {attr.max_qp}")
        if ctx.query_port(1).state != e.IBV_PORT_ACTIVE:
            raise SystemExit("FAIL port 1 is not active")
        gid = ctx.query_gid(1, gid_index)
        with PD(ctx) as pd:
            access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
            src = MR(pd, 64, access)
            dst = MR(pd, 64, access)
            src.write(b"pyverbs over softrdma".ljust(64, b"."), 64)
            cq = CQ(ctx, 16)
            cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
            qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
            qa = QPAttr(port_num=1)
            qa.qp_access_flags = access
            qa.dest_qp_num = qp.qp_num
            qa.path_mtu = e.IBV_MTU_1024
            qa.max_dest_rd_atomic = 1
            qa.max_rd_atomic = 1
            qa.min_rnr_timer = 12
            qa.timeout = 14
            qa.retry_cnt = 7
            qa.rnr_retry = 7
            qa.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=gid_index),
                                is_global=1, port_num=1)
            qp.to_rts(qa)
            if qp.qp_state != e.IBV_QPS_RTS:
                raise SystemExit(f"FAIL QP state {qp.qp_state} after to_rts")
            wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(src.buf, 64, src.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_rdma(dst.rkey, dst.buf)
            qp.post_send(wr)
            for _ in range(1000000):
                n, wcs = cq.poll()
                if n:
                    break
            else:
                raise SystemExit("FAIL no completion for the RDMA WRITE")
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise SystemExit(f"FAIL completion status {wcs[0].status}")
            if dst.read(64, 0) != src.read(64, 0):
                raise SystemExit("FAIL the WRITE's target does not hold the source's bytes")
            qp.close()
            cq.close()
            src.close()
            dst.close()
    print(f"PASS pyverbs on {name}: devices {names}; RC QP to RTS, RDMA WRITE of 64 bytes checked")


main()
