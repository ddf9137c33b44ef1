package store

import "github.com/zeebo/xxh3"

// frequencySketch is TinyLFU's admission filter (Einziger, Friedman, Manes,
// "TinyLFU: A Highly Efficient Cache Admission Policy", 2017): a count-min
// sketch of how often each block was seen, halved every resetAfter
// additions so old popularity fades. Disk admission asks it whether a block
// was seen at least AdmitAfter times, which keeps one-hit blocks off the
// SSD (write endurance) without keeping a per-key history.
type frequencySketch struct {
	rows       [sketchDepth][]uint8
	mask       uint64
	additions  int
	resetAfter int
}

const sketchDepth = 4

// sketchSeeds give each row an independent index (odd multipliers).
var sketchSeeds = [sketchDepth]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xd6e8feb86659fd93}

func newFrequencySketch(items int) *frequencySketch {
	items = max(items, 16)
	width := 64
	for width < 4*items {
		width *= 2
	}
	f := &frequencySketch{mask: uint64(width - 1), resetAfter: 10 * items}
	for i := range f.rows {
		f.rows[i] = make([]uint8, width)
	}
	return f
}

func keyDigest(k Key) uint64 {
	return xxh3.HashString(k.Namespace) ^ (k.Hash * 0xff51afd7ed558ccd)
}

func (f *frequencySketch) index(d uint64, row int) uint64 {
	x := (d ^ sketchSeeds[row]) * sketchSeeds[(row+1)%sketchDepth]
	return (x ^ x>>31) & f.mask
}

func (f *frequencySketch) add(k Key) {
	d := keyDigest(k)
	for r := range f.rows {
		i := f.index(d, r)
		if f.rows[r][i] < 255 {
			f.rows[r][i]++
		}
	}
	if f.additions++; f.additions >= f.resetAfter {
		for r := range f.rows {
			for i := range f.rows[r] {
				f.rows[r][i] >>= 1
			}
		}
		f.additions /= 2
	}
}

func (f *frequencySketch) estimate(k Key) int {
	d := keyDigest(k)
	est := 255
	for r := range f.rows {
		est = min(est, int(f.rows[r][f.index(d, r)]))
	}
	return est
}
