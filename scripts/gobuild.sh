#!/usr/bin/env bash
# go build, saying how far it has got: `go build -v` names each package as it
# compiles it (cached ones are not named), and a cold first build compiles
# over a thousand of them for minutes, which plain `go build` spends silent.
# This counts those names and prints a line at most every 15 seconds while
# packages keep coming; every other line (compile errors) passes through, and
# the exit status is go build's. Usage: scripts/gobuild.sh LABEL [go build args…]
set -o pipefail
label=$1
shift
"${GO:-go}" build -v "$@" 2>&1 | {
	n=0
	last=$SECONDS
	while IFS= read -r line; do
		# A package path: no spaces, no colon, not a "# pkg" error header.
		if [[ $line =~ ^[^[:space:]:#]+$ ]]; then
			n=$((n + 1))
			if ((SECONDS - last >= 15)); then
				echo "$label: $n packages compiled so far…"
				last=$SECONDS
			fi
		else
			printf '%s\n' "$line"
		fi
	done
	if ((n > 0)); then
		echo "$label: $n packages compiled"
	fi
}
