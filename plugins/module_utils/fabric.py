# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Whether a node answers over the fabric at all.

Ray cannot say it: it keeps a silent node "alive" until its health check has missed for minutes (see
timeouts.LIVENESS_PROFILE), and a worker that cannot reach the head retries its join for minutes more. One
TCP connection says it in seconds: an accepted or a refused connection both prove the path works both ways
(the node answered); no answer at all is what a cut link or a dropping firewall looks like. A firewall that
rejects (sends back a reset or an ICMP error) is an answer too, and is reported by Ray's own errors instead.
"""

from __future__ import annotations

import concurrent.futures
import socket

ANSWER_TIMEOUT_S = 5.0


def reach(ip, port, timeout=ANSWER_TIMEOUT_S):
    """(True, how it answered) or (False, why there was no answer)."""
    try:
        socket.create_connection((ip, int(port)), timeout=timeout).close()
        return True, "accepted"
    except ConnectionRefusedError:
        return True, "refused"
    except (socket.timeout, TimeoutError):
        return False, "no answer in %g s" % timeout
    except OSError as exc:  # no route to host, network unreachable: no answer either
        return False, exc.strerror or str(exc)


def silent(ips, port, timeout=ANSWER_TIMEOUT_S):
    """{ip: why} for each address that gives no answer on port; all asked at once, so 16 silent nodes
    cost one timeout, not sixteen."""
    ips = sorted(set(ips))
    if not ips or not port:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(ips))) as pool:
        answers = dict(zip(ips, pool.map(lambda ip: reach(ip, port, timeout), ips)))
    return {ip: why for ip, (answered, why) in answers.items() if not answered}
