// Package logbuffer is the log and output sink tests hand to a process
// or server that writes from its own goroutines while the test reads it
// (a bytes.Buffer is not safe for that).
package logbuffer

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex; the zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
