// Package kvstream carries an inference engine's KV-event stream over ZMQ:
// a Subscriber that delivers batches in sequence order, detects gaps and
// repairs them through the engine's replay endpoint, and a Publisher that
// speaks the same protocol (for tests and the engine simulator).
//
// The wire protocol is vLLM's ZmqEventPublisher
// (vllm/distributed/kv_events.py); SGLang publishes the same framing.
// This package deals in frames only — topic, sequence number, payload
// bytes — and never decodes the msgpack payload (kv/kvevents does).
package kvstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Frame counts and sizes fixed by vLLM's ZmqEventPublisher:
// live messages are [topic, seq(8B BE), payload]; replay requests reach the
// ROUTER as [identity, "", start(8B BE)], so a DEALER sends ["", start].
// Replay replies reach the DEALER in one of two layouts:
//   - since vLLM v0.26 (vllm-project/vllm#45177, _service_replay):
//     ["", topic, seq, payload], end marker ["", "", END_SEQ, ""];
//   - before it, and SGLang still (python/sglang/srt/disaggregation/
//     kv_events.py; RFC sgl-project/sglang#39991 proposes the change):
//     ["", seq, payload], end marker ["", END_SEQ, ""].
//
// Both are accepted on every reply, so one subscriber works with old and
// new engines; the topic, when present, is checked like a live one.
const (
	liveFrames        = 3
	replyFramesLegacy = 3
	replyFramesTopic  = 4
	seqFrameSize      = 8
)

// ReplayLayout is the replay reply layout a Publisher writes.
type ReplayLayout uint8

const (
	// ReplayWithTopic is vLLM ≥ v0.26: ["", topic, seq, payload].
	ReplayWithTopic ReplayLayout = iota
	// ReplayLegacy is vLLM < v0.26 and SGLang: ["", seq, payload].
	ReplayLegacy
)

// ParseReplayLayout reads "v0.26" / "topic" or "legacy" / "v0.25".
func ParseReplayLayout(s string) (ReplayLayout, error) {
	switch s {
	case "", "v0.26", "topic":
		return ReplayWithTopic, nil
	case "legacy", "v0.25", "sglang":
		return ReplayLegacy, nil
	}
	return 0, fmt.Errorf("replay layout %q: want v0.26 (topic frame) or legacy", s)
}

// endOfReplaySeq is vLLM's END_SEQ, (-1).to_bytes(8, "big", signed=True):
// as an unsigned counter it would need 2^64-1 batches, so it cannot clash
// with a real sequence number.
const endOfReplaySeq = ^uint64(0)

// errMalformed marks a message that breaks the framing rules; the
// Subscriber counts and drops it.
var errMalformed = errors.New("malformed message")

// liveMessage is one validated live batch.
type liveMessage struct {
	seq     uint64
	payload []byte
}

// parseLive validates a live PUB message: exactly three frames, a topic
// starting with the subscribed prefix (ZMQ subscriptions are prefix
// matches), an 8-byte seq and a payload within maxPayload bytes.
func parseLive(frames [][]byte, topic string, maxPayload int) (liveMessage, error) {
	if len(frames) != liveFrames {
		return liveMessage{}, fmt.Errorf("%w: live message has %d frames, want %d [topic, seq, payload]", errMalformed, len(frames), liveFrames)
	}
	if !strings.HasPrefix(string(frames[0]), topic) {
		return liveMessage{}, fmt.Errorf("%w: topic frame %q does not start with subscribed topic %q", errMalformed, truncateForLog(frames[0]), topic)
	}
	seq, err := parseSeq(frames[1])
	if err != nil {
		return liveMessage{}, err
	}
	if seq == endOfReplaySeq {
		return liveMessage{}, fmt.Errorf("%w: live message carries the end-of-replay sequence number", errMalformed)
	}
	if len(frames[2]) > maxPayload {
		return liveMessage{}, fmt.Errorf("%w: seq %d payload is %d bytes, limit %d", errMalformed, seq, len(frames[2]), maxPayload)
	}
	return liveMessage{seq: seq, payload: frames[2]}, nil
}

// replayReply is one validated replay reply; end is true for the end marker.
type replayReply struct {
	seq     uint64
	payload []byte
	end     bool
}

// parseReplayReply validates a replay reply as the DEALER sees it, in
// either layout (see replyFramesTopic): ["", topic, seq, payload] or
// ["", seq, payload], and the end markers ["", "", END_SEQ, ""] and
// ["", END_SEQ, ""]. A topic frame must start with the subscribed topic,
// as a live message's must.
func parseReplayReply(frames [][]byte, topic string, maxPayload int) (replayReply, error) {
	if len(frames) != replyFramesLegacy && len(frames) != replyFramesTopic {
		return replayReply{}, fmt.Errorf("%w: replay reply has %d frames, want 4 [\"\", topic, seq, payload] (vLLM >= v0.26) or 3 [\"\", seq, payload]", errMalformed, len(frames))
	}
	if len(frames[0]) != 0 {
		return replayReply{}, fmt.Errorf("%w: replay reply delimiter frame is %d bytes, want empty", errMalformed, len(frames[0]))
	}
	rest := frames[1:]
	var gotTopic []byte
	if len(frames) == replyFramesTopic {
		gotTopic, rest = frames[1], frames[2:]
	}
	seq, err := parseSeq(rest[0])
	if err != nil {
		return replayReply{}, err
	}
	if seq == endOfReplaySeq {
		// vLLM writes an empty topic before END_SEQ.
		if len(gotTopic) != 0 {
			return replayReply{}, fmt.Errorf("%w: replay end marker carries topic %q, want empty", errMalformed, truncateForLog(gotTopic))
		}
		if len(rest[1]) != 0 {
			return replayReply{}, fmt.Errorf("%w: replay end marker payload is %d bytes, want empty", errMalformed, len(rest[1]))
		}
		return replayReply{end: true}, nil
	}
	if gotTopic != nil && !strings.HasPrefix(string(gotTopic), topic) {
		return replayReply{}, fmt.Errorf("%w: replayed seq %d has topic %q, not the subscribed %q", errMalformed, seq, truncateForLog(gotTopic), topic)
	}
	if len(rest[1]) > maxPayload {
		return replayReply{}, fmt.Errorf("%w: replayed seq %d payload is %d bytes, limit %d", errMalformed, seq, len(rest[1]), maxPayload)
	}
	return replayReply{seq: seq, payload: rest[1]}, nil
}

// parseReplayRequest validates a replay request as the ROUTER sees it:
// [identity, "", start]. vLLM ignores requests of any other shape.
func parseReplayRequest(frames [][]byte) (identity []byte, start uint64, err error) {
	if len(frames) != 3 {
		return nil, 0, fmt.Errorf("%w: replay request has %d frames, want 3 [identity, \"\", start]", errMalformed, len(frames))
	}
	if len(frames[1]) != 0 {
		return nil, 0, fmt.Errorf("%w: replay request delimiter frame is %d bytes, want empty", errMalformed, len(frames[1]))
	}
	start, err = parseSeq(frames[2])
	if err != nil {
		return nil, 0, err
	}
	return frames[0], start, nil
}

func parseSeq(frame []byte) (uint64, error) {
	if len(frame) != seqFrameSize {
		return 0, fmt.Errorf("%w: seq frame is %d bytes, want %d (big-endian uint64)", errMalformed, len(frame), seqFrameSize)
	}
	return binary.BigEndian.Uint64(frame), nil
}

func encodeSeq(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, seqFrameSize), seq)
}

// truncateForLog keeps hostile frames from flooding the log.
func truncateForLog(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
