//go:build ignore

// natsd runs an embedded NATS server with JetStream for docs/scale/measure.py
// (go build -o /tmp/kvs/natsd docs/scale/natsd.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	port := flag.Int("port", 4222, "")
	dir := flag.String("dir", "/tmp/kvs/js", "")
	flag.Parse()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: *port, JetStream: true, StoreDir: *dir, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		panic(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("not ready")
	}
	fmt.Println("nats ready", s.ClientURL())
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	<-c
	s.Shutdown()
}
