#!/usr/bin/env bash
# Sourced by ray-node.sh and entrypoint.sh: every Ray process and CLI on the node uses token
# authentication (Ray's RAY_AUTH_MODE=token). Without a token, nothing starts.
#
# The token comes from a Kubernetes Secret (RAY_AUTH_TOKEN, set by the pod spec) or from a file
# delivered with the bundle (cluster/make-ray-token.sh writes one), owned by the service user,
# mode 0600, at RAY_AUTH_TOKEN_PATH (default /etc/ocr/secrets/ray_auth_token). It is never in the image.

ray_token_auth() {
  export RAY_AUTH_MODE=token
  if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then
    return 0
  fi
  local token_file="${RAY_AUTH_TOKEN_PATH:-/etc/ocr/secrets/ray_auth_token}"
  if [[ ! -r "$token_file" || ! -s "$token_file" ]]; then
    echo "error: no Ray token: $token_file is missing, empty or unreadable (make one with cluster/make-ray-token.sh," \
      "copy the same file to every node, or set RAY_AUTH_TOKEN from a Secret)" >&2
    return 1
  fi
  local mode
  mode="$(stat -c %a "$token_file")"
  if [[ "$mode" != "600" && "$mode" != "400" ]]; then
    echo "error: $token_file has mode $mode; a Ray token must be readable by its owner only: chmod 600 $token_file" >&2
    return 1
  fi
  export RAY_AUTH_TOKEN_PATH="$token_file"
}
