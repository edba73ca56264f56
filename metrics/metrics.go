// Package metrics exports softrdma devices' counters to Prometheus.
//
// A Collector reads each device's Counters (provider/soft.Device) at
// scrape time and reports every counter as softrdma_<name>_total with a
// "device" label: softrdma_sent_pkts_total{device="softrdma_eth0"}. The
// names mirror rxe's hw_counters where rxe has the counter (sent_pkts,
// rcvd_pkts, rcvd_rnr_err, ...), so dashboards built on the kernel's
// rdma statistics read the same names. A counter that is a level rather
// than a count (cc_limited_qps: QPs rate-limited now) is a gauge without
// the _total suffix. A device that reports its QPs' congestion control
// (QPRater, as *soft.Device does) adds per QP
// softrdma_qp_rate_bits_per_second and softrdma_qp_rate_limited, labelled
// with device and qpn.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(dev))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/softrdma/softrdma/provider/soft"
)

// Source is what a Collector reads: a device's name and its counters.
// *soft.Device implements it.
type Source interface {
	Name() string
	Counters() []soft.Counter
}

// QPRater is implemented by sources that report each QP's congestion
// control state; *soft.Device does.
type QPRater interface {
	QPRates() []soft.QPRate
}

// gauges are the device counters that are levels, not counts.
var gauges = map[string]bool{"cc_limited_qps": true}

// Collector is a prometheus.Collector over devices' counters. It is safe
// for concurrent use; the zero value is not usable: call NewCollector.
type Collector struct {
	mu    sync.Mutex
	srcs  []Source
	descs map[string]*prometheus.Desc
	up    *prometheus.Desc
	rate  *prometheus.Desc
	limit *prometheus.Desc
}

// NewCollector returns a Collector over srcs.
func NewCollector(srcs ...Source) *Collector {
	return &Collector{srcs: srcs, descs: map[string]*prometheus.Desc{},
		up: prometheus.NewDesc("softrdma_device_info", "A softrdma device (value 1).", []string{"device"}, nil),
		rate: prometheus.NewDesc("softrdma_qp_rate_bits_per_second", "A QP's congestion control rate (DCQCN's current rate; the line rate while not limited).",
			[]string{"device", "qpn"}, nil),
		limit: prometheus.NewDesc("softrdma_qp_rate_limited", "1 while CNPs keep a QP's rate below the line rate.", []string{"device", "qpn"}, nil)}
}

// Add adds a device to the collector.
func (c *Collector) Add(s Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.srcs = append(c.srcs, s)
}

// Describe sends nothing: the counters are known only at scrape time,
// which makes this an unchecked collector.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends one counter metric per device counter.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	srcs := append([]Source(nil), c.srcs...)
	c.mu.Unlock()
	for _, s := range srcs {
		name := s.Name()
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1, name)
		for _, ctr := range s.Counters() {
			kind := prometheus.CounterValue
			if gauges[ctr.Name] {
				kind = prometheus.GaugeValue
			}
			ch <- prometheus.MustNewConstMetric(c.desc(ctr.Name), kind, float64(ctr.Value), name)
		}
		if r, ok := s.(QPRater); ok {
			for _, q := range r.QPRates() {
				qpn := fmt.Sprintf("%#06x", q.QPN)
				limited := 0.0
				if q.Limited {
					limited = 1
				}
				ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, float64(q.Rate), name, qpn)
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, limited, name, qpn)
			}
		}
	}
}

func (c *Collector) desc(counter string) *prometheus.Desc {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.descs[counter]
	if !ok {
		full := "softrdma_" + counter + "_total"
		if gauges[counter] {
			full = "softrdma_" + counter
		}
		d = prometheus.NewDesc(full, "softrdma device counter "+counter+".", []string{"device"}, nil)
		c.descs[counter] = d
	}
	return d
}

// Serve serves /metrics for srcs on addr (host:port) until ctx is done,
// with the Go runtime and process collectors alongside. It returns once
// the listener is up, with its address (addr may have port 0); stop stops
// the server.
func Serve(ctx context.Context, addr string, srcs ...Source) (bound net.Addr, stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(srcs...), prometheus.NewGoCollector(),
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed; nothing to report to
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { srv.Close() }) }
	context.AfterFunc(ctx, stop)
	return ln.Addr(), stop, nil
}
