#!/usr/bin/env python3
"""Send one hand-made RoCEv2 packet to a guest's rxe, to prove that datagrams
from the namespace reach rxe and that rxe accepts a correctly computed ICRC.

Run inside the namespace (vm.sh nsexec python3 roce_probe.py 10.77.0.2 [bad]).
The packet is a UD SEND_ONLY to QP1 (the GSI QP every rxe device has) with the
GSI Q_Key. rxe counts it in hw_counters/rcvd_pkts only after the ICRC check
passed; with "bad" the ICRC is corrupted and the counter must not move. The
payload is a meaningless 256-byte MAD, which the MAD layer then discards.

ICRC (see shared/DESIGN.md): CRC-32 over 8 bytes of 0xFF, the IPv4 header with
TOS, TTL and checksum set to all ones, the UDP header with its checksum set to
all ones, the BTH with byte 4 set to 0xFF, and the rest of the packet;
appended little-endian. An unconnected UDP socket with IP_PMTUDISC_DO sends
IPv4 identification 0, so the header is known in advance.
"""
import socket
import struct
import sys
import zlib

SRC = "10.77.0.1"  # br0, the host side of the namespace
SPORT = 49152
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def main():
    dst = sys.argv[1] if len(sys.argv) > 1 else "10.77.0.2"
    bad = len(sys.argv) > 2 and sys.argv[2] == "bad"
    payload = bytes(256)
    # BTH: opcode 0x64 (UD SEND_ONLY), SE/M/pad/TVer 0, P_Key 0xFFFF, reserved,
    # dest QPN 1, AckReq/reserved 0, PSN 0x123.
    bth = (struct.pack("!BBH", 0x64, 0, 0xFFFF) + b"\x00" + (1).to_bytes(3, "big")
           + b"\x00" + (0x123).to_bytes(3, "big"))
    # DETH: Q_Key 0x80010000 (GSI), reserved, source QPN 1.
    deth = struct.pack("!I", 0x80010000) + b"\x00" + (1).to_bytes(3, "big")
    udp_len = 8 + len(bth) + len(deth) + len(payload) + 4
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, 0, 0x4000, 0xFF, 17, 0xFFFF,
                      socket.inet_aton(SRC), socket.inet_aton(dst))
    udph = struct.pack("!HHHH", SPORT, 4791, udp_len, 0xFFFF)
    masked_bth = bth[:4] + b"\xff" + bth[5:]
    icrc = zlib.crc32(b"\xff" * 8 + iph + udph + masked_bth + deth + payload)
    if bad:
        icrc ^= 1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.bind((SRC, SPORT))
    s.sendto(bth + deth + payload + struct.pack("<I", icrc), (dst, 4791))
    print(f"sent UD SEND_ONLY to {dst}:4791 QP1, ICRC {icrc:#010x}{' (corrupted)' if bad else ''}")


if __name__ == "__main__":
    main()
