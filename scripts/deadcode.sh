#!/usr/bin/env bash
# Fails when Go code is unreachable where it should not be (issue 18: "deadcode
# lists no production function"). Two checks, with golang.org/x/tools'
# deadcode (pinned; `go run` fetches it through the module proxy):
#
# 1. From the programs (bin/kvgate, bin/kvgate-lab, the dashboard renderer):
#    every function of the product packages is reachable from one of them. A
#    product function only tests call is test API and belongs in a _test.go
#    file or lab/testkit. Workshop packages (e2e/, lab/testkit/,
#    cmd/kvgate-lab/, deploy/inventory — the dashboards' and alerts' checker,
#    deploy/dashboards/render) exist for tests and tools and are exempt here.
# 2. With the tests (all build tags the suites use): no function anywhere is
#    unreachable even from a test.
#
# internal/third_party/jinja is exempt from both: the fork keeps upstream's
# shape (FORK.md), including what kvgate's templates do not call.
set -euo pipefail
cd "$(dirname "$0")/.."
DEADCODE=(go run golang.org/x/tools/cmd/deadcode@v0.52.0)
workshop='^(lab/|e2e/|internal/third_party/|cmd/kvgate-lab/|deploy/inventory/|deploy/dashboards/render/)'
status=0

out=$(mktemp)
trap 'rm -f "$out"' EXIT

# deadcode prints paths relative to the working directory; a load or type
# error ends the script here (set -e), never an empty "ok".
"${DEADCODE[@]}" ./cmd/kvgate ./cmd/kvgate-lab ./deploy/dashboards/render >"$out"
from_programs=$(grep -Ev "$workshop" "$out" || true)
if [ -n "$from_programs" ]; then
	echo "deadcode: product functions no program reaches (move test-only API into _test.go or lab/testkit, or delete it):"
	echo "$from_programs"
	status=1
fi

"${DEADCODE[@]}" -test -tags e2e,soak,helm ./... >"$out"
with_tests=$(grep -Ev '^internal/third_party/' "$out" || true)
if [ -n "$with_tests" ]; then
	echo "deadcode: functions nothing reaches, tests included (delete them):"
	echo "$with_tests"
	status=1
fi

[ $status -eq 0 ] && echo "deadcode: ok (every product function reachable from a program; nothing unreachable from the tests)"
exit $status
