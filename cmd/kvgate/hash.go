package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kv/blockhash"
)

func init() {
	register("hash", cli.Command{
		Summary: "hash token blocks as Dynamo does: JSON {tokens,block_size,lora?,namespace?} on stdin",
		Run:     runHash,
	})
}

// maxHashInput bounds what `kvgate hash` reads: 64 MiB is ~10 M tokens.
const maxHashInput = 64 << 20

func runHash(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate hash", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: kvgate hash < request.json\n\n"+
			"Reads {\"tokens\":[…],\"block_size\":N,\"lora\":\"…\",\"namespace\":\"…\"} on stdin and prints\n"+
			"{\"local\":[…],\"sequence\":[…]}: the block hashes Dynamo's router computes (lora and namespace optional).\n\n"+
			"example:\n  echo '{\"tokens\":[1,2,3,4],\"block_size\":2}' | kvgate hash\n")
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate hash: takes no arguments, got %q\n", fs.Args())
		return 2
	}
	res, err := hashInput(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate hash: %v\n", err)
		return 2
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "kvgate hash: writing output: %v\n", err)
		return 1
	}
	return 0
}

func hashInput(r io.Reader) (blockhash.Result, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHashInput+1))
	if err != nil {
		return blockhash.Result{}, fmt.Errorf("reading stdin: %w", err)
	}
	if len(data) > maxHashInput {
		return blockhash.Result{}, fmt.Errorf("input larger than %d bytes", maxHashInput)
	}
	var req struct {
		Tokens    *[]uint32 `json:"tokens"`
		BlockSize *int      `json:"block_size"`
		LoRA      string    `json:"lora"`
		Namespace string    `json:"namespace"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return blockhash.Result{}, describeJSONError(err)
	}
	if dec.More() {
		return blockhash.Result{}, errors.New("trailing data after the JSON object")
	}
	if req.Tokens == nil {
		return blockhash.Result{}, errors.New(`missing field "tokens"`)
	}
	if req.BlockSize == nil {
		return blockhash.Result{}, errors.New(`missing field "block_size"`)
	}
	return blockhash.Compute(blockhash.Request{Tokens: *req.Tokens, BlockSize: *req.BlockSize, LoRA: req.LoRA, Namespace: req.Namespace})
}
