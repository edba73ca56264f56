#!/usr/bin/env bash
# test/congestion/incast.sh — softrdma pairs sharing one congested kernel
# queue, with one command from the host.
#
# Builds a static softrdma, boots the interop VM (test/interop/vm.sh; its
# kernel has the red and fq_codel qdiscs this host's lacks), runs
# incast-run.sh there and shuts the VM down. See README.md next to this file.
#
#   bash test/congestion/incast.sh [incast-run.sh options]        # in the VM
#   bash test/congestion/incast.sh --host [incast-run.sh options] # in this host's kernel (-q pfifo)
#   SOFTRDMA_VM_LOCK=/tmp/vm.lock bash test/congestion/incast.sh  # hold that flock while the VM is up
#
# Examples: -n 4 -r 8mbit -D 10 -q red -c "off dcqcn" (the defaults but -c,
# which is "off" unless SOFTRDMA_CC's modes are given).
# Only traffic between namespaces this script creates is sent.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export PATH=/usr/local/go/bin:$PATH
VM="bash $ROOT/test/interop/vm.sh"
RUNNER=$ROOT/test/congestion/incast-run.sh

# INCAST_BIN=FILE runs that (static) softrdma instead of building this tree's
# (to compare with an older build).
BIN=$(mktemp -d)/softrdma
trap 'rm -rf "$(dirname "$BIN")"' EXIT
if [ -n "${INCAST_BIN:-}" ]; then
	cp "$INCAST_BIN" "$BIN" || exit 1
else
	CGO_ENABLED=0 go build -o "$BIN" ./cmd/softrdma || exit 1
fi

if [ "${1:-}" = --host ]; then
	shift
	exec bash "$RUNNER" -q pfifo -b "$BIN" "$@"
fi

if [ -n "${SOFTRDMA_VM_LOCK:-}" ]; then
	exec 9>"$SOFTRDMA_VM_LOCK"
	flock 9
fi
$VM build >/dev/null || { echo "incast: vm.sh build failed"; exit 1; }
$VM down >/dev/null 2>&1
trap '$VM down >/dev/null 2>&1; rm -rf "$(dirname "$BIN")"' EXIT
# A signal ends the script through the EXIT trap too: a VM left running
# would hold the lock it inherited.
trap 'exit 143' TERM
trap 'exit 130' INT
$VM up 1 >/dev/null || { echo "incast: vm.sh up failed"; $VM log vm1 | tail -30; exit 1; }
COMMON=$($VM path common)
cp "$BIN" "$RUNNER" "$COMMON/"
# The VM runs the whole thing as one job: generous timeout (TCG is slow and
# a congested run drains its queues after -D).
args=""
[ $# -gt 0 ] && args=$(printf '%q ' "$@")
SOFTRDMA_VM_TIMEOUT=${INCAST_TIMEOUT:-900} $VM exec vm1 \
	"INCAST_WORK=/share/incast bash /common/incast-run.sh -b /common/softrdma $args"
rc=$?
echo "(outputs: $($VM path vm1)/incast)"
exit $rc
