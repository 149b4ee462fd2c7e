#!/bin/sh
# PID 1 of a simulated Spark node: authorise the controller's key, start sshd, run dockerd.
set -eu
if [ -n "${SIM_AUTHORIZED_KEY:-}" ]; then
  printf '%s\n' "$SIM_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
# A node that was stopped keeps its /var/run: a stale pid file would stop dockerd from starting again.
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid /run/sshd.pid
ssh-keygen -A >/dev/null 2>&1
/usr/sbin/sshd -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password
exec dockerd --host unix:///var/run/docker.sock >/var/log/dockerd.log 2>&1
