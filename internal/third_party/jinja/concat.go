package jinja

import "strings"

// evalAddChain evaluates a left-nested chain of '+' (((a + b) + c) + ...),
// as chat templates build each turn: '<|im_start|>' + message.role + '\n' +
// content + '<|im_end|>' + '\n' (Qwen3's template, and most ChatML ones).
// Folding it pairwise with addValues copies the message content once per
// '+'; here the operands are evaluated in the same left-to-right order,
// folded with addValues until the running value becomes a string (after
// which addValues would only ever concatenate printValue of each operand),
// and the string tail is joined once. The result equals the pairwise fold:
// operand evaluation has the same order and errors, and '+' itself has no
// side effects (kvgate fork, FORK.md item 7).
func (e *evaluator) evalAddChain(n *binExpr) (Value, error) {
	var pieces [8]string
	acc, tail, size, err := e.foldAddChain(n, pieces[:0])
	if err != nil || len(tail) == 0 {
		return acc, err
	}
	var out strings.Builder
	out.Grow(size)
	for _, s := range tail {
		out.WriteString(s)
	}
	return NewString(out.String()), nil
}

// emitAddChain is {{ chain }}: the same fold, but a string tail is written
// to the output piece by piece instead of joined into a string first and
// then copied again. A ~8k-token Qwen3 prompt's messages were each copied
// twice, half of a render's bytes allocated (BENCHMARKS.md, issue 27 item
// 3). Every operand is evaluated before anything is written, as before, so
// an operand's error leaves the output as the joined path would.
func (e *evaluator) emitAddChain(n *binExpr) error {
	var pieces [8]string
	acc, tail, _, err := e.foldAddChain(n, pieces[:0])
	if err != nil {
		return err
	}
	if len(tail) == 0 {
		e.emit(printValue(acc))
		return nil
	}
	for _, s := range tail {
		e.emit(s)
	}
	return nil
}

// foldAddChain evaluates the chain's operands left to right and folds them
// with addValues until the running value becomes a string; from there on it
// returns the pieces to concatenate (appended to tail) and their total size
// instead. With no string, the result is acc and tail is empty.
func (e *evaluator) foldAddChain(n *binExpr, tail []string) (acc Value, _ []string, size int, _ error) {
	var operands [8]expr
	ops := operands[:0]
	for x := expr(n); ; {
		b, ok := x.(*binExpr)
		if !ok || b.op != "+" {
			ops = append(ops, x)
			break
		}
		ops = append(ops, b.right)
		x = b.left
	}
	// ops holds the chain right to left: ops[len-1] is the leftmost operand.
	acc, err := e.evalExpr(ops[len(ops)-1])
	if err != nil {
		return Undefined(), nil, 0, err
	}
	for i := len(ops) - 2; i >= 0; i-- {
		v, err := e.evalExpr(ops[i])
		if err != nil {
			return Undefined(), nil, 0, err
		}
		switch {
		case len(tail) > 0:
			s := printValue(v)
			tail = append(tail, s)
			size += len(s)
		case acc.IsString() || v.IsString():
			// addValues(acc, v) is printValue(acc) + printValue(v); so is
			// every later step.
			a, s := printValue(acc), printValue(v)
			tail = append(tail, a, s)
			size += len(a) + len(s)
		default:
			acc = addValues(acc, v)
		}
	}
	return acc, tail, size, nil
}
