package rdmanet

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// The benchmarks run rdmanet (over soft devices and over the shared-memory
// provider) and Go's TCP on loopback side by side, in the same run:
// streaming 64 KiB writes, and a 64-byte request/response.
//
//	go test -run XXX -bench . -count 5 ./rdmanet | benchstat -col /net -

func benchPairs(b *testing.B) map[string]func() (net.Conn, net.Conn) {
	return map[string]func() (net.Conn, net.Conn){
		"net=rdmanet": func() (net.Conn, net.Conn) {
			devices(b)
			c, s := pair(b, nil)
			return c, s
		},
		"net=rdmanet-shm": func() (net.Conn, net.Conn) {
			a, bd := shmDevices(b)
			c, s := connectPair(b, a, bd, Config{})
			return c, s
		},
		"net=tcp": func() (net.Conn, net.Conn) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ch := make(chan net.Conn, 1)
			go func() {
				s, _ := l.Accept()
				ch <- s
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			return c, <-ch
		},
	}
}

// cpuTime is the CPU time (user and system) the process used so far: both
// ends and, for rdmanet, the devices' goroutines. On a loaded machine the
// CPU per operation varies less than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchNets are the benchmarks' sub-benchmarks: rdmanet over soft
// devices (RoCEv2 over loopback UDP) and over the shared-memory provider
// (Connect), and Go's TCP.
var benchNets = []string{"net=rdmanet", "net=rdmanet-shm", "net=tcp"}

func BenchmarkStream64K(b *testing.B) {
	for _, name := range benchNets {
		b.Run(name, func(b *testing.B) {
			c, s := benchPairs(b)[name]()
			defer c.Close()
			defer s.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(io.Discard, s)
				close(done)
			}()
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			<-done
			reportCPU(b, cpu)
		})
	}
}

func BenchmarkPingPong64(b *testing.B) {
	for _, name := range benchNets {
		b.Run(name, func(b *testing.B) {
			c, s := benchPairs(b)[name]()
			defer c.Close()
			defer s.Close()
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(s, buf); err != nil {
						return
					}
					if _, err := s.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// Read and Write allocate nothing in steady state, over soft devices and
// over the shared-memory provider.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	t.Run("soft", func(t *testing.T) {
		devices(t)
		c, s := pair(t, nil)
		zeroAllocs(t, c, s)
	})
	t.Run("shm", func(t *testing.T) {
		a, b := shmDevices(t)
		c, s := connectPair(t, a, b, Config{})
		zeroAllocs(t, c, s)
	})
}

func zeroAllocs(t *testing.T, c, s *Conn) {
	defer c.Close()
	defer s.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	big := make([]byte, 64<<10)
	roundTrip := func() {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1000; i++ { // past the first credit updates
		roundTrip()
	}
	if n := testing.AllocsPerRun(1000, roundTrip); n != 0 {
		t.Errorf("a 64-byte Write and Read allocate %v times", n)
	}
	// Streaming: the peer echoes, this side reads it back.
	stream := func() {
		if _, err := c.Write(big[:4096]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, big[:4096]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		stream()
	}
	if n := testing.AllocsPerRun(200, stream); n != 0 {
		t.Errorf("a 4 KiB Write and Read allocate %v times", n)
	}
}
