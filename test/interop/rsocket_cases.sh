# test/interop/rsocket_cases.sh — rsocket cases (rdmanet against librdmacm's
# rsocket), sourced by suite.sh after cm_cases.sh (it uses cm_case). Full
# run only: TCG guests move rsocket traffic slowly.
#
# rstream and riostream in both roles, same arguments on both sides, data verified
# (-T v: a byte counter across every transfer of the run):
#   small      1000-byte transfers, credits and inline writes
#   lat        64-byte ping-pong, one transfer per direction per iteration
#   ring-wrap  a 16 KiB buffer (32 KiB ring) with 100 kB transfers: many
#              ring halves granted back with RS_OP_SGL, writes split at
#              area ends
for c in "small|-S 1000 -C 100 -T v" "lat|-S 64 -C 1 -I 200 -T v" "ring-wrap|-B 16384 -S 100000 -C 20 -T v"; do
	n=${c%%|*} a=${c#*|}
	cm_case "rstream-$n-rxe-server" rxe-server rstream "$a" "$a" -s
	cm_case "rstream-$n-softrdma-server" soft-server rstream "$a" "$a" -s
done
# riostream: each side riomaps its buffer (RS_OP_IOMAP_SGL) and the other
# riowrites into it (plain RDMA WRITEs); the receiver watches the last byte.
for c in "small|-S 1000 -C 10 -T v" "lat|-S 64 -C 1 -I 200 -T v"; do
	n=${c%%|*} a=${c#*|}
	cm_case "riostream-$n-rxe-server" rxe-server riostream "$a" "$a" -s
	cm_case "riostream-$n-softrdma-server" soft-server riostream "$a" "$a" -s
done
