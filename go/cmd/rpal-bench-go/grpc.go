// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"context"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// gRPC-go, unary: service rpal.Echo, methods Echo and Stop, whose messages
// are raw bytes (a pass-through codec: no protobuf, so the rows measure
// gRPC's transport and not a marshaller).

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

// Unmarshal copies: gRPC may reuse data once it returns.
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

func serveGRPC(l net.Listener, s *echoService) (func(), error) {
	method := func(name string, h func([]byte) ([]byte, error)) grpc.MethodDesc {
		return grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var m []byte
				if err := dec(&m); err != nil {
					return nil, err
				}
				out, err := h(m)
				return &out, err
			},
		}
	}
	desc := grpc.ServiceDesc{
		ServiceName: "rpal.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			method("Echo", s.echo),
			method("Stop", func([]byte) ([]byte, error) { s.stop(); return nil, nil }),
		},
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&desc, nil)
	go srv.Serve(l)
	// Graceful: the Stop call's own reply goes out first.
	return srv.GracefulStop, nil
}

type grpcClient struct{ cc *grpc.ClientConn }

// dialGRPC: one ClientConn, one HTTP/2 connection, whatever the concurrency.
func dialGRPC(dial func(context.Context, string) (net.Conn, error), addr string, _ int) (unaryClient, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, err
	}
	return grpcClient{cc}, nil
}

func (g grpcClient) call(ctx context.Context, req []byte) ([]byte, error) {
	var resp []byte
	err := g.cc.Invoke(ctx, "/rpal.Echo/Echo", &req, &resp)
	return resp, err
}

func (g grpcClient) stop(ctx context.Context) error {
	var none []byte
	return g.cc.Invoke(ctx, "/rpal.Echo/Stop", &none, &none)
}

func (g grpcClient) close() error { return g.cc.Close() }
