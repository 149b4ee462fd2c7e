#!/usr/bin/env bash
# Make this machine able to host the simulated cluster: a running Docker engine, debootstrap and
# ssh-keygen. Installs only what is missing (Debian packages), starts dockerd when no init system does.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v tar >/dev/null 2>&1 || need+=(tar)
if [ "${#need[@]}" -gt 0 ]; then
  echo "[ensure-host] installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "[ensure-host] starting dockerd"
  mkdir -p /var/log
  nohup dockerd >/var/log/sparkfleet-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/sparkfleet-dockerd.log" >&2; exit 1; }
fi
echo "[ensure-host] docker $(docker version --format '{{.Server.Version}}') ready"
