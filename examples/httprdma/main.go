// Command httprdma runs net/http over RDMA: an http.Server serves on an
// rdmanet listener and an http.Client whose Transport dials with
// rdmanet, each on its own softrdma device in this process. The bytes
// between them are rsocket's protocol over RoCEv2, so the server could
// as well be reached by a C client under librspreload. The lines between
// "README begin" and "README end" are the README's rdmanet example
// (main_test.go checks it).
//
//	go run ./examples/httprdma
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/rdmanet"
)

func main() {
	client := flag.String("client", "127.0.0.4", "IP address of the client's device")
	server := flag.String("server", "127.0.0.5", "IP address of the server's device")
	port := flag.Uint("udp", 4791, "UDP port of both devices")
	flag.Parse()
	if err := run(*client, *server, uint16(*port), 3); err != nil {
		log.Fatal(err)
	}
}

func run(clientIP, serverIP string, udpPort uint16, requests int) error {
	for _, ip := range []string{clientIP, serverIP} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(ip), Port: udpPort})
		if err != nil {
			return err
		}
		defer dev.Close()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/upper", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(bytes.ToUpper(b))
	})
	// README begin
	// The server: an rdmanet.Listener is a net.Listener (":7471" would
	// listen on every device of the host).
	ln, err := rdmanet.Listen("rdma", serverIP+":0")
	if err != nil {
		return err
	}
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over RDMA, %s\n", r.RemoteAddr)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	// The client: an http.Transport that dials with rdmanet.
	var d rdmanet.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "rdma", ln.Addr().String())
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get("http://rdma/hello")
	// README end
	for i := 1; ; i++ {
		if err != nil {
			return err
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil {
			return rerr
		}
		fmt.Printf("GET /hello: %s %s", resp.Status, strings.Split(string(b), ",")[0]+"\n")
		if i >= requests {
			break
		}
		resp, err = hc.Get("http://rdma/hello")
	}
	body := strings.Repeat("rdma ", 100000) // 500 kB, many ring turns
	resp, err = hc.Post("http://rdma/upper", "text/plain", strings.NewReader(body))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if string(b) != strings.ToUpper(body) {
		return fmt.Errorf("POST /upper: %d bytes back, not the upper-cased %d", len(b), len(body))
	}
	fmt.Printf("POST /upper: %s, %d bytes back\n", resp.Status, len(b))
	return nil
}
