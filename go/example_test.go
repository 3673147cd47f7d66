// SPDX-License-Identifier: MIT

//go:build linux

package rpal_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	"rpal.dev/rpal"
)

// A byte-stream server: Listener is a net.Listener and Accept returns a
// net.Conn.  This one upper-cases what each client sends until the client
// stops writing.  (The client here is in the same process to keep the
// example self-contained; it is usually another one.)
func ExampleListen() {
	l, err := rpal.Listen("example-upper") // <runtime dir>/example-upper.sock
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // l was closed
			}
			go func() {
				defer c.Close()
				b, err := io.ReadAll(c) // up to the client's CloseWrite
				if err == nil {
					c.Write(bytes.ToUpper(b))
				}
			}()
		}
	}()

	c, err := rpal.Dial("example-upper")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello, rpal"))
	c.(*rpal.Stream).CloseWrite()
	reply, err := io.ReadAll(c) // up to the server's Close
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply))
	// Output: HELLO, RPAL
}

// A byte-stream client: Dial returns a net.Conn, so bufio, io.Copy and
// the rest of the standard library work on it.
func ExampleDial() {
	// An echo server in this process, for the example.
	l, err := rpal.Listen("example-echo")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	c, err := rpal.Dial("example-echo")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "ping %d\n", 1)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(line)
	// Output: ping 1
}

// The message API: messages keep their boundaries.  Send and Recv copy
// once; ReadMsg hands out a message in place (in the sender's arena, for
// one larger than rpal.InlineMax bytes) until Ack gives it back.
func ExampleDialConn() {
	l, err := rpal.Listen("example-msg")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			m, err := c.ReadMsg() // io.EOF after the client's CloseWrite
			if err != nil {
				return
			}
			reply := fmt.Sprintf("%d bytes", m.Len())
			m.Ack() // m.Bytes() must not be used after this
			if err := c.Send([]byte(reply)); err != nil {
				return
			}
		}
	}()

	c, err := rpal.DialConn("example-msg")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, msg := range [][]byte{[]byte("short"), make([]byte, 100000)} {
		if err := c.Send(msg); err != nil {
			log.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	for range 2 {
		n, err := c.Recv(buf)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(buf[:n]))
	}
	c.CloseWrite()
	// Output:
	// 5 bytes
	// 100000 bytes
}

// Zero copy both ways: the sender fills a buffer of its own arena and
// publishes it with WriteMsg; the receiver reads it in place with ReadMsg
// and gives it back with Ack, which frees it.
func ExampleConn_WriteMsg() {
	l, err := rpal.Listen("example-zerocopy")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	got := make(chan string)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			return
		}
		defer c.Close()
		m, err := c.ReadMsg()
		if err != nil {
			return
		}
		got <- fmt.Sprintf("%s (%d bytes, in place: %v)", m.Bytes(), m.Len(), m.InPlace())
		m.Ack()
	}()

	c, err := rpal.DialConn("example-zerocopy")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, err := rpal.Alloc(4096)
	if err != nil {
		log.Fatal(err)
	}
	n := copy(b.Bytes(), "hello, zero copy")
	b.Truncate(n) // send only what was written
	if err := c.WriteMsg(b); err != nil {
		b.Free() // still ours
		log.Fatal(err)
	}
	fmt.Println(<-got)
	// Output: hello, zero copy (16 bytes, in place: true)
}

// Stream users work unchanged: here net/http serves on an rpal Listener,
// and its client dials through Dialer.DialContext.  gRPC takes the same
// two pieces: grpc.Server.Serve(l) and grpc.WithContextDialer(d.DialContext).
func ExampleStream() {
	l, err := rpal.Listen("example-http")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s over %s", r.URL.Path, l.Addr().Network())
	})}
	go srv.Serve(l)
	defer srv.Close()

	var d rpal.Dialer
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "example-http")
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://example/greeting")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK hello from /greeting over rpal
}

// One address for local and remote: the server listens on a TCP port both
// ways, and a client that dials "host:port" through a TCPDialer goes over
// rpal when the server is on its machine, over TCP when it is not.  Here
// net/http is served on the TCPListener and its client takes the dialer's
// DialContext; gRPC takes grpc.Server.Serve(l) and
// grpc.WithContextDialer(d.DialAddr).  A client that dials TCP itself
// still reaches the same server.
func ExampleListenTCP() {
	l, err := rpal.ListenTCP("tcp", "127.0.0.1:0") // TCP, and rpal for local clients
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(w, "served over %s", local.Network())
	})}
	go srv.Serve(l)
	defer srv.Close()

	url := "http://" + l.Addr().String() + "/"
	var d rpal.TCPDialer
	for _, c := range []struct {
		name string
		t    *http.Transport
	}{
		{"rpal.TCPDialer", &http.Transport{DialContext: d.DialContext}},
		{"net.Dialer", &http.Transport{DialContext: (&net.Dialer{}).DialContext}},
	} {
		resp, err := (&http.Client{Transport: c.t}).Get(url)
		if err != nil {
			log.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.t.CloseIdleConnections()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s\n", c.name, body)
	}
	// Output:
	// rpal.TCPDialer: served over rpal
	// net.Dialer: served over tcp
}
