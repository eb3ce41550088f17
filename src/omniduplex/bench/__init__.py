"""``omniduplex bench``: load and latency benchmark for Realtime speech servers.

::

    omniduplex bench --url ws://HOST:PORT/v1/realtime [--sessions N] [--ramp]
        [--duration S] [--chunk-ms MS] [--scenario talk|barge-in|resume|mixed|stream]
        [--input WAV_DIR] [--dialect ga|beta] [--out results.json] [--plot results.png]
        [--floor-echo] [--server-pid PID]

N concurrent sessions each stream audio at real-time pace in ``--chunk-ms`` appends (any
size that is a whole number of samples at the input rate: 80 is one PersonaPlex/Moshi
frame) and run turns until ``--duration`` is over. A server whose ``session.created`` carries a
``resume_token`` is one of ours and is driven with ``DuplexClient`` (``barge_in``,
``playback.ack``, resume); any other server gets plain Realtime events, so the bench can
measure servers that are not ours. Scenarios, per turn:

* ``talk``: speak, commit (or ``--turn-detection server_vad``: trailing silence), receive
  the whole reply, ``playback.ack`` it;
* ``barge-in``: interrupt the reply at a random point with ``barge_in`` or
  ``response.cancel`` (``--cancel-method``), ack the played part with truncation;
* ``resume``: cut the socket mid-reply (``drop_connection``) and let the client resume;
* ``mixed``: each turn picks talk (50%), barge-in (30%) or resume (20%);
* ``stream``: no turns: 24 kHz audio in at real-time pace and nothing else (a
  model-native server refuses commits), over plain Realtime events; measures output
  audio rate, frame latency (output frame *i* answers input frame *i*, anchored at the
  first output) and its growth, and sessions held in real time (``timeline`` defines
  each). Results: ``aggregate.stream`` and ``per_session[].stream``; under ``--ramp`` a
  level holds when every session is held in real time.

Every time is the client's ``perf_counter`` and every duration is in ms. Results JSON
(``--out``), schema ``omniduplex.bench/1``:

``config``, ``machine``, ``server`` (``url``, ``kind`` duplex|realtime, ``model``),
``sessions``, ``started_at``, ``wall_s``;

``floor``: ``heartbeat_rtt_ms`` (``session.heartbeat`` round trip on one more session of
the same server while the N sessions run), ``ws_ping_rtt_ms`` (WebSocket ping on that
connection), ``idle_heartbeat_rtt_ms`` / ``idle_ws_ping_rtt_ms`` (the same probe before the
sessions start), ``echo`` (``--floor-echo``: ``rtt_ms`` of a minimal WebSocket echo server
driven with N connections at the chunk cadence), ``basis`` and ``floor_ms`` (the loaded
heartbeat p50, else the ping p50);

``aggregate`` (all sessions) and ``per_session[]`` (each): distributions
``{count, mean, p50, p95, p99, min, max}`` of

* ``reply_latency_ms``: commit sent (or end of speech) -> first audio delta;
* ``barge_in_stop_ms``: cancel sent -> ``response.done`` with status cancelled;
* ``late_audio_bytes`` / ``late_audio_ms``: audio of a cancelled response received after
  the cancel was sent (per cancelled response);
* ``event_lag_ms``: per audio delta, arrival minus the moment a player that started at the
  response's first delta reaches that audio (0 when early);
* ``underrun_gap_ms`` and ``underruns`` (+ ``underruns_per_audio_minute``): silences such a
  player would play (``--playout-ms`` of jitter buffer, default 20);
* ``send_lag_ms``: how late the client sent each append against its real-time schedule
  (the bench's own saturation);
* ``resume_ms``: socket cut -> session resumed; ``drops``, ``events_lost`` and
  ``events_duplicated`` (holes and repeats in ``server_event_seq`` as delivered),
  ``replay_duplicates_dropped`` (replayed events the client discarded),
  ``audio_ms_missing`` (completed replies shorter than the server's own
  ``audio_duration_ms``);

plus ``turns``, ``events``, ``responses`` (by status), ``cancel_methods``,
``cancels_too_late`` (cancels that crossed the reply's own end; the server's
``response_cancel_not_active`` answer to them is not an error), ``errors`` and
``errors_by_code``, ``ratio_to_floor`` (p50/p95/p99 of each latency over ``floor_ms``) and
``ratio_to_echo`` (over the echo p50, with ``--floor-echo``);

``server_resources``: from ``/proc/PID`` (``--server-pid``, or the local process listening
on the URL's port): ``cpu_s``, ``cpu_percent``, ``cpu_percent_per_session``,
``cpu_ms_per_session_second``, ``rss_start_bytes``, ``rss_peak_bytes``,
``rss_per_session_bytes``; for a remote server ``{"source": "metrics"}``;
``server_metrics``: the server's ``GET /metrics`` between the start and the end of the
run (sessions admitted/rejected, appends, events sent by type, resumes, outbox drops,
journal bytes, its own reply-latency and barge-in-stop histograms as p50/p95/p99), or
``null``; ``client``: the bench process's ``cpu_s`` / ``cpu_percent``, ``loop_lag_ms``
(overshoot of a 50 ms timer on its event loop) and ``gc_pause_ms``: when these are large
the run measured the client (or a busy machine: see ``machine.loadavg_*``), not the
server;

``ramp`` (``--ramp``, else ``null``): ``lag_bound_ms``, ``max_sessions_held`` (largest N
with p95 event lag within the bound, every session opened, no errors) and ``levels[]``
(per N: event lag and reply latency percentiles, underruns, floor, errors, server CPU and
RSS per session, client CPU). The top-level report is the last level run.
"""

from __future__ import annotations

from .cli import add_arguments, main, run_command
from .runner import BenchConfig, run_bench

__all__ = ["BenchConfig", "add_arguments", "main", "run_bench", "run_command"]
