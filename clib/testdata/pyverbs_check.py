"""pyverbs_check DEVICE GID_INDEX: rdma-core's Python bindings (Debian's
python3-pyverbs) over softrdma's libibverbs.so.1.

Lists the devices, opens DEVICE, queries it, its port and a GID, and
allocates a PD, an MR, a CQ and an RC QP; steps the QP through INIT, RTR
and RTS connected to itself, moves a buffer with an RDMA WRITE, polls the
completion and checks the bytes. Then the same with a CQEX
(ibv_create_cq_ex) and three WRITEs, whose completions it walks with
start_poll / poll_next / end_poll, reading opcode, byte_len and qp_num.
Prints PASS or raises.

Run: LD_LIBRARY_PATH=DIR /usr/bin/python3 pyverbs_check.py softrdma_lo 1
(clib/test.sh does, when pyverbs is installed).
"""
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def rc_to_self(pd, gid, gid_index, access, cq):
    """An RC QP on cq, connected to itself, in RTS."""
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
    return qp


def cqex_writes(ctx, pd, gid, gid_index, access, src, dst):
    """Three signaled WRITEs of 8, 16 and 24 bytes on a QP whose CQ is a
    CQEX; their completions walked with start_poll / poll_next."""
    cqx = CQEX(ctx, CqInitAttrEx(cqe=16, wc_flags=e.IBV_WC_STANDARD_FLAGS))
    qp = rc_to_self(pd, gid, gid_index, access, cqx)
    for i in (1, 2, 3):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(src.buf, 8 * i, src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(dst.rkey, dst.buf)
        qp.post_send(wr)
    seen = []
    for _ in range(1000000):
        if len(seen) == 3:
            break
        if cqx.start_poll(PollCqAttr()) != 0:
            continue
        while True:
            if cqx.status != e.IBV_WC_SUCCESS:
                raise SystemExit(f"FAIL CQEX completion status {cqx.status}")
            if cqx.read_opcode() != e.IBV_WC_RDMA_WRITE or cqx.read_qp_num() != qp.qp_num:
                raise SystemExit(f"FAIL CQEX opcode {cqx.read_opcode()} qp_num {cqx.read_qp_num()}")
            seen.append(cqx.wr_id)
            if cqx.poll_next() != 0:
                break
        cqx.end_poll()
    if seen != [1, 2, 3]:
        raise SystemExit(f"FAIL CQEX completions {seen}, want [1, 2, 3]")
    qp.close()
    cqx.close()


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
            qp = rc_to_self(pd, gid, gid_index, access, cq)
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
            cqex_writes(ctx, pd, gid, gid_index, access, src, dst)
            src.close()
            dst.close()
    print(f"PASS pyverbs on {name}: devices {names}; RC QP to RTS, RDMA WRITE of 64 bytes checked; CQEX walked")


main()
