#!/bin/sh
# Side by side in one run: UCX over shared memory (ucx_perftest, when
# installed) and provider/shm's Go benchmarks, each repeated; medians are
# taken by the reader (or benchstat). Usage, from the repository root:
#
#	sh provider/shm/testdata/compare.sh [repeats]
#
# Both sides of every test busy-poll: on a machine with two cores the
# figures are as noisy as the machine's other load.
set -u
reps=${1:-5}
port=13337
ucx() { # tls test size iterations
	UCX_TLS=$1 timeout 60 ucx_perftest -p $port >/dev/null 2>&1 &
	sleep 0.5
	UCX_TLS=$1 timeout 60 ucx_perftest -p $port localhost -t $2 -s $3 -n $4 2>&1 | awk -v t="$1 $2 $3" '/Final:/ {print "ucx", t, "lat_us_median", $3, "MB/s", $6, "msg/s", $8}'
	wait
}
if command -v ucx_perftest >/dev/null; then
	for i in $(seq "$reps"); do
		for tls in posix,self sysv,self cma,self; do
			ucx $tls ucp_put_lat 8 20000
			ucx $tls ucp_put_bw 65536 5000
			ucx $tls tag_lat 8 20000
			ucx $tls tag_bw 8 100000
		done
	done
else
	echo "ucx_perftest not installed (apt-get install ucx-utils): UCX columns skipped"
fi
go test ./provider/shm -run '^$' -bench . -benchtime 20000x -count "$reps"
