#!/usr/bin/env bash
# generate.sh encodes each frames/*.txtpb with protoc --encode against the
# .proto files of every version its "# versions:" line names, into
# golden/VERSION/NAME.bin. Needs protoc (Debian: protobuf-compiler, which
# brings google/protobuf/*.proto under /usr/include). The frames are
# committed: the tests do not run protoc.
set -euo pipefail
cd "$(dirname "$0")"
include=${PROTOC_INCLUDE:-/usr/include}
rm -rf golden
for src in frames/*.txtpb; do
	name=$(basename "$src" .txtpb)
	file=$(sed -n 's/^# proto-file: //p' "$src")
	message=$(sed -n 's/^# proto-message: //p' "$src")
	versions=$(sed -n 's/^# versions: //p' "$src")
	for v in $versions; do
		mkdir -p "golden/$v"
		protoc -I "$v/proto" -I "$include" --encode="$message" "$v/proto/$file" <"$src" >"golden/$v/$name.bin"
		# Cross-check: the frame decodes back with the same protos.
		protoc -I "$v/proto" -I "$include" --decode="$message" "$v/proto/$file" <"golden/$v/$name.bin" >/dev/null
	done
done
