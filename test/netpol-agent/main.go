// netpol-agent: one per pod network namespace in the network policy tests
// (test/integration/flannel-netpol.test.ts), server and prober at once.
//
// It serves TCP 80, TCP 81 and UDP 80 on every address of its namespace
// (both families): a TCP connection is answered "ok\n", a UDP datagram is
// sent back. It also records every SCTP packet that reaches the namespace
// (a raw socket: the test kernel may have no SCTP stack, and policy is about
// whether the packet arrives): its destination port and the Initiate Tag of
// its INIT chunk.
//
// It reads one JSON command per line on stdin and answers each with one JSON
// line on stdout, commands running side by side (a probe that is dropped
// costs its timeout, not the others' time):
//
//	{"id":1,"op":"probe","proto":"tcp","ip":"10.86.1.5","port":80,"timeoutMs":1000}   -> {"id":1,"ok":true}
//	{"id":2,"op":"probe","proto":"udp",...}                                            -> {"id":2,"ok":false,"err":"..."}
//	{"id":3,"op":"probe","proto":"sctp","ip":...,"port":80,"tag":77}                   -> {"id":3,"ok":true} (sent)
//	{"id":4,"op":"seen"}                     -> {"id":4,"ok":true,"seen":["80/77",...]} (SCTP INITs received, since the last "seen")
//
// For the benchmark (test/bench/netpol.mjs), UDP 9 is a sink that counts what
// it gets, and a flood sends small datagrams as fast as it can:
//
//	{"id":5,"op":"flood","ip":"10.99.2.2","port":9,"ms":2000,"size":64}     -> {"id":5,"ok":true,"count":812345} (sent)
//	{"id":6,"op":"count"}                    -> {"id":6,"ok":true,"count":801234} (received on UDP 9, since the last "count")
//
// It prints {"ready":true} once it listens. Built by the integration tests'
// global setup with Debian's Go (GO111MODULE=off, standard library only).
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type command struct {
	ID        int    `json:"id"`
	Op        string `json:"op"`
	Proto     string `json:"proto"`
	IP        string `json:"ip"`
	Port      int    `json:"port"`
	TimeoutMs int    `json:"timeoutMs"`
	Tag       uint32 `json:"tag"`
	Ms        int    `json:"ms"`
	Size      int    `json:"size"`
}

type answer struct {
	ID    int      `json:"id"`
	OK    bool     `json:"ok"`
	Err   string   `json:"err,omitempty"`
	Seen  []string `json:"seen,omitempty"`
	Count int64    `json:"count,omitempty"`
}

var (
	outMu sync.Mutex
	out   = bufio.NewWriter(os.Stdout)

	seenMu sync.Mutex
	seen   []string

	sunk int64 // datagrams the UDP 9 sink got (atomic)
)

func say(v interface{}) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	defer outMu.Unlock()
	out.Write(append(b, '\n'))
	out.Flush()
}

func fatal(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "netpol-agent: "+format+"\n", args...)
	os.Exit(1)
}

func serveTCP(port int) {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		fatal("listen tcp %d: %v", port, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				continue
			}
			go func() {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Write([]byte("ok\n"))
				c.Close()
			}()
		}
	}()
}

func serveUDP(port int) {
	c, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
	if err != nil {
		fatal("listen udp %d: %v", port, err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				continue
			}
			c.WriteTo(buf[:n], from)
		}
	}()
}

// recordSCTP keeps "dport/tag" of each SCTP INIT that reaches the namespace.
func recordSCTP(network string) {
	c, err := net.ListenPacket(network, "")
	if err != nil {
		fatal("listen %s: %v", network, err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil || n < 20 || buf[12] != 1 { // common header (12 bytes), then an INIT chunk (type 1)
				continue
			}
			dport := binary.BigEndian.Uint16(buf[2:4])
			tag := binary.BigEndian.Uint32(buf[16:20])
			seenMu.Lock()
			seen = append(seen, fmt.Sprintf("%d/%d", dport, tag))
			seenMu.Unlock()
		}
	}()
}

// sink counts the datagrams that reach UDP 9.
func sink() {
	c, err := net.ListenPacket("udp", ":9")
	if err != nil {
		fatal("listen udp 9: %v", err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFrom(buf); err == nil {
				atomic.AddInt64(&sunk, 1)
			}
		}
	}()
}

// flood sends `size`-byte datagrams to ip:port for `ms` milliseconds, as fast as one socket can; returns how many.
func flood(c command) answer {
	a := answer{ID: c.ID}
	conn, err := net.Dial("udp", net.JoinHostPort(c.IP, fmt.Sprint(c.Port)))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	defer conn.Close()
	payload := make([]byte, c.Size)
	end := time.Now().Add(time.Duration(c.Ms) * time.Millisecond)
	for n := 0; ; n++ {
		if n%256 == 0 && time.Now().After(end) {
			break
		}
		if _, err := conn.Write(payload); err == nil {
			a.Count++
		}
	}
	a.OK = true
	return a
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpInit is an SCTP packet holding one INIT chunk, with its CRC32c (as the kernel computes it: little-endian).
func sctpInit(srcPort, dstPort uint16, tag uint32) []byte {
	p := make([]byte, 32)
	binary.BigEndian.PutUint16(p[0:], srcPort)
	binary.BigEndian.PutUint16(p[2:], dstPort)
	// verification tag 0 (an INIT), checksum below
	p[12] = 1 // INIT
	binary.BigEndian.PutUint16(p[14:], 20)
	binary.BigEndian.PutUint32(p[16:], tag)
	binary.BigEndian.PutUint32(p[20:], 65536) // a_rwnd
	binary.BigEndian.PutUint16(p[24:], 1)     // outbound streams
	binary.BigEndian.PutUint16(p[26:], 1)     // inbound streams
	binary.BigEndian.PutUint32(p[28:], tag)   // initial TSN
	binary.LittleEndian.PutUint32(p[8:], crc32.Checksum(p, castagnoli))
	return p
}

func probe(c command) answer {
	timeout := time.Duration(c.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = time.Second
	}
	addr := net.JoinHostPort(c.IP, fmt.Sprint(c.Port))
	a := answer{ID: c.ID}
	switch c.Proto {
	case "tcp":
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			a.Err = err.Error()
			return a
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(conn).ReadString('\n')
		a.OK = err == nil && line == "ok\n"
		if err != nil {
			a.Err = err.Error()
		}
	case "udp":
		conn, err := net.Dial("udp", addr)
		if err != nil {
			a.Err = err.Error()
			return a
		}
		defer conn.Close()
		token := fmt.Sprintf("probe %d", c.ID)
		conn.SetDeadline(time.Now().Add(timeout))
		if _, err := conn.Write([]byte(token)); err != nil {
			a.Err = err.Error()
			return a
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		a.OK = err == nil && string(buf[:n]) == token
		if err != nil {
			a.Err = err.Error()
		}
	case "sctp":
		network := "ip4:132"
		if strings.Contains(c.IP, ":") {
			network = "ip6:132"
		}
		conn, err := net.Dial(network, c.IP)
		if err != nil {
			a.Err = err.Error()
			return a
		}
		defer conn.Close()
		_, err = conn.Write(sctpInit(uint16(40000+c.ID%20000), uint16(c.Port), c.Tag))
		a.OK = err == nil
		if err != nil {
			a.Err = err.Error()
		}
	default:
		a.Err = "unknown protocol " + c.Proto
	}
	return a
}

func main() {
	serveTCP(80)
	serveTCP(81)
	serveUDP(80)
	recordSCTP("ip4:132")
	recordSCTP("ip6:132")
	sink()
	say(map[string]bool{"ready": true})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fatal("bad command %q: %v", in.Text(), err)
		}
		switch c.Op {
		case "probe":
			go func(c command) { say(probe(c)) }(c)
		case "flood":
			go func(c command) { say(flood(c)) }(c)
		case "count":
			say(answer{ID: c.ID, OK: true, Count: atomic.SwapInt64(&sunk, 0)})
		case "seen":
			seenMu.Lock()
			s := seen
			seen = nil
			seenMu.Unlock()
			say(answer{ID: c.ID, OK: true, Seen: s})
		default:
			say(answer{ID: c.ID, Err: "unknown op " + c.Op})
		}
	}
}
