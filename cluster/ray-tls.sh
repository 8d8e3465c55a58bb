#!/usr/bin/env bash
# Sourced by ray-node.sh and entrypoint.sh: Ray's gRPC between processes and nodes is mutual TLS
# (Ray's RAY_USE_TLS) with the fleet's certificate, so the cluster token and every document's
# pages never cross the network in clear. Without the files, nothing starts.
#
# The files come with the bundle (cluster/make-tls.sh makes them, or the site's own PKI):
# OCR_TLS_DIR (default /etc/ocr/tls) holds ca.crt, node.crt and node.key (mode 0600). The
# certificate must name every address a node is reached by. OCR_RAY_TLS=off turns this off, for
# a site whose nodes talk over a network that is encrypted underneath (say so in its runbook).

ray_tls() {
  if [[ "${OCR_RAY_TLS:-on}" == "off" ]]; then
    echo "warning: OCR_RAY_TLS=off: Ray's traffic between nodes is not encrypted" >&2
    return 0
  fi
  local dir="${OCR_TLS_DIR:-/etc/ocr/tls}" name mode
  for name in ca.crt node.crt node.key; do
    if [[ ! -r "$dir/$name" || ! -s "$dir/$name" ]]; then
      echo "error: no $dir/$name: Ray runs with mutual TLS (cluster/make-tls.sh makes the files; copy them to" \
        "every node), or set OCR_RAY_TLS=off on every node of a network encrypted underneath" >&2
      return 1
    fi
  done
  mode="$(stat -c %a "$dir/node.key")"
  if [[ "$mode" != "600" && "$mode" != "400" ]]; then
    echo "error: $dir/node.key has mode $mode; a private key must be readable by its owner only: chmod 600 it" >&2
    return 1
  fi
  export RAY_USE_TLS=1 RAY_TLS_SERVER_CERT="$dir/node.crt" RAY_TLS_SERVER_KEY="$dir/node.key" RAY_TLS_CA_CERT="$dir/ca.crt"
}
