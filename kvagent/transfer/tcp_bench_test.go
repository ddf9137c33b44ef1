package transfer

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// BenchmarkTCPRead pulls 64 MiB over loopback as one request of
// block-sized descriptors (cmd/kvgate's kvagent-transfer section compares
// the same against a raw TCP copy).
func BenchmarkTCPRead(b *testing.B) {
	const total = 64 << 20
	for _, streams := range []int{1, 4} {
		for _, block := range []int{64 << 10, 256 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("streams=%d/block=%dKiB", streams, block>>10), func(b *testing.B) {
				src, err := newTCP(TCPConfig{Name: "src"})
				if err != nil {
					b.Fatal(err)
				}
				defer src.Close()
				dst, err := newTCP(TCPConfig{Name: "dst", Streams: streams})
				if err != nil {
					b.Fatal(err)
				}
				defer dst.Close()
				sh, _ := src.RegisterMem(Region{Kind: DRAM, Addr: make([]byte, total)})
				dh, _ := dst.RegisterMem(Region{Kind: DRAM, Addr: make([]byte, total)})
				md, _ := src.LocalMetadata()
				dst.LoadRemoteMetadata(md)
				var ld, rd []Desc
				for off := int64(0); off < total; off += int64(block) {
					ld = append(ld, Desc{Region: dh, Offset: off, Len: int64(block)})
					rd = append(rd, Desc{Region: sh, Offset: off, Len: int64(block)})
				}
				x, err := dst.CreateXfer(Read, ld, "src", rd, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(total)
				b.ResetTimer()
				cpu0 := cpuSeconds()
				for range b.N {
					if err := dst.Post(x); err != nil {
						b.Fatal(err)
					}
					if err := Wait(context.Background(), dst, x); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((cpuSeconds()-cpu0)/(float64(b.N)*total/1e9), "cpu-s/GB")
			})
		}
	}
}

// BenchmarkRawLoopback is the baseline: 64 MiB over one loopback TCP
// connection, no framing, read straight into the destination.
func BenchmarkRawLoopback(b *testing.B) {
	const total = 64 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		src := make([]byte, total)
		for {
			if _, err := c.Write(src); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	dst := make([]byte, total)
	b.SetBytes(total)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for range b.N {
		if _, err := io.ReadFull(c, dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuSeconds()-cpu0)/(float64(b.N)*total/1e9), "cpu-s/GB")
}

// cpuSeconds is the process's user+system CPU time: on a shared machine
// the CPU spent per byte is steadier than the wall-clock rate.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkTCPReadTLS is BenchmarkTCPRead over mutual TLS (every peer off
// loopback), protocol version 2 (CRC-32C frames inside TLS) against 3 (no
// frame checksum inside TLS), 1 stream, 256 KiB descriptors.
func BenchmarkTCPReadTLS(b *testing.B) {
	const total, block = 64 << 20, 256 << 10
	ca := newTestCA(b, "bench CA")
	for _, version := range []uint8{2, 3} {
		b.Run(fmt.Sprintf("version=%d", version), func(b *testing.B) {
			src, err := newTCP(TCPConfig{Name: "src", TLS: mutualTLS(ca.issue(b, "src"), ca.pool)})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			dst, err := newTCP(TCPConfig{Name: "dst", Streams: 1, TLS: mutualTLS(ca.issue(b, "dst"), ca.pool), maxVersion: version})
			if err != nil {
				b.Fatal(err)
			}
			defer dst.Close()
			sh, _ := src.RegisterMem(Region{Kind: DRAM, Addr: make([]byte, total)})
			dh, _ := dst.RegisterMem(Region{Kind: DRAM, Addr: make([]byte, total)})
			md, _ := src.LocalMetadata()
			dst.LoadRemoteMetadata(md)
			var ld, rd []Desc
			for off := int64(0); off < total; off += block {
				ld = append(ld, Desc{Region: dh, Offset: off, Len: block})
				rd = append(rd, Desc{Region: sh, Offset: off, Len: block})
			}
			x, err := dst.CreateXfer(Read, ld, "src", rd, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(total)
			b.ResetTimer()
			cpu0 := cpuSeconds()
			for range b.N {
				if err := dst.Post(x); err != nil {
					b.Fatal(err)
				}
				if err := Wait(context.Background(), dst, x); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpuSeconds()-cpu0)/(float64(b.N)*total/1e9), "cpu-s/GB")
		})
	}
}
