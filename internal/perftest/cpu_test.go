package perftest

import (
	"bytes"
	"strings"
	"testing"
)

func TestCPUStat(t *testing.T) {
	a, err := ReadCPUStat(strings.NewReader("cpu  100 5 40 900 3 0 2 0 0 0\ncpu0 50 2 20 450 1 0 1 0 0 0\n"))
	if err != nil || a != (CPUStat{User: 100, Idle: 900}) {
		t.Fatalf("ReadCPUStat = %+v, %v", a, err)
	}
	b := CPUStat{User: 400, Idle: 1000}
	// perftest: user delta over user plus idle deltas.
	if got := CPUUtil(a, b); got != 75 {
		t.Fatalf("CPUUtil = %v, want 75", got)
	}
	if got := CPUUtil(a, a); got != 0 {
		t.Fatalf("CPUUtil of no time = %v, want 0", got)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2\n", "cpu x 1 2 y\n"} {
		if _, err := ReadCPUStat(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadCPUStat(%q) succeeded", bad)
		}
	}
}

// With --cpu_util the heading and rows end with perftest's CPU column;
// without it they are unchanged.
func TestCPUUtilColumn(t *testing.T) {
	var plain, cpu bytes.Buffer
	r := BWReport{Size: 65536, Iters: 1000, BWAvg: 2283.48, MsgRate: 0.036536, CPUUtil: 97.5}
	WriteBWHeader(&plain, BWFormat{})
	WriteBWRow(&plain, r, BWFormat{})
	WriteBWHeader(&cpu, BWFormat{CPUUtil: true})
	WriteBWRow(&cpu, r, BWFormat{CPUUtil: true})
	if strings.Contains(plain.String(), "CPU") || !strings.HasSuffix(plain.String(), "0.036536\n") {
		t.Fatalf("plain table:\n%s", plain.String())
	}
	want := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]    CPU_Util[%]\n" +
		" 65536      1000             0.00               2283.48\t\t   0.036536\t    97.50\n"
	if !strings.HasSuffix(cpu.String(), want) {
		t.Fatalf("table with CPU column:\n%q\nwant suffix\n%q", cpu.String(), want)
	}
	var d bytes.Buffer
	WriteLatDurationHeader(&d, true)
	WriteLatDurationRow(&d, LatDurationStats{Size: 8, Iters: 10, TAvg: 1.5, TPS: 2, CPUUtil: 3.25}, true)
	if !strings.Contains(d.String(), "tps average    CPU_Util[%]\n") || !strings.HasSuffix(d.String(), "\t    3.25\n") {
		t.Fatalf("duration table with CPU column:\n%q", d.String())
	}
}
