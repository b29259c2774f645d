"""The soak's steady stream: generated events with the demo's data faults, paced in real
time, and the soak's own log of what it sent and what Kafka acknowledged.

The log (``sent.jsonl``) has one line per message handed to the producer
(``{"sent": [tag, topic, event_id, sha1 of the value]}``) and one per acknowledgement
(``{"ack": [topic, partition, offset, tag, event_id]}``). The verdict matches what Kafka holds
to it by the value's hash: a record Kafka holds although its send failed (a retry whose
acknowledgement was lost) still has a known tag; an acknowledged record that Bronze lacks is
a loss.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from ingestctl.producer import Message, ProduceResult, encode_value, produce
from ingestctl.replay.faults import DelayDistribution, FaultConfig, FaultCounts, inject
from ingestctl.replay.generator import generate_events
from ingestctl.replay.runner import Pace, paced

#: The data faults of the stream: the demo's kinds, every quarantine reason in turn, and late
#: events 45-60 minutes of event time behind (past Silver's watermark).
DATA_FAULTS = {
    "duplicate_rate": 0.02,
    "late_rate": 0.02,
    "late_delay": DelayDistribution("uniform", 2700.0, 3600.0),
    "out_of_order_rate": 0.02,
    "malformed_rate": 0.01,
    "drift_rate": 0.01,
}


def value_hash(value: bytes | None) -> str:
    """The sha1 of a record's value bytes (``"null"`` for a tombstone)."""
    return "null" if value is None else hashlib.sha1(value).hexdigest()


def event_id_of(value: Any) -> str | None:
    """A message value's ``event_id`` when it is a mapping that has one."""
    if isinstance(value, dict):
        found = value.get("event_id")
        return str(found) if found is not None else None
    return None


@dataclass
class StreamStats:
    """What the stream has done so far (read by the progress display)."""

    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    finished: bool = False
    error: str | None = None
    counts: FaultCounts = field(default_factory=FaultCounts)


class SoakStream(threading.Thread):
    """Send ``rate`` events per wall second for ``duration_s`` seconds in a thread.

    Event time runs ``speed`` times faster than wall time and ends about now, so late events
    (held back 45-60 minutes of event time) are sent within the run.

    :param bootstrap: the Kafka bootstrap servers.
    :param prefix: the platform's topic prefix.
    :param log_path: where the soak's log goes (see the module docstring).
    :param seed: seed of the generator and of the data faults.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        prefix: str,
        log_path: Path,
        rate: float,
        speed: float,
        duration_s: float,
        seed: int,
    ) -> None:
        super().__init__(name="soak-stream", daemon=True)
        if rate <= 0 or speed <= 0 or duration_s <= 0:
            raise ValueError("rate, speed and duration_s must be positive")
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.log_path = log_path
        self.rate = rate
        self.speed = speed
        self.duration_s = duration_s
        self.seed = seed
        self.stats = StreamStats()
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Stop handing over new messages (what was handed over is still resolved)."""
        self._halt.set()

    def run(self) -> None:
        try:
            with self.log_path.open("a", encoding="utf-8") as log:
                self._send(log)
        except Exception as error:  # reported by the runner, which fails the soak
            self.stats.error = f"{type(error).__name__}: {error}"
        finally:
            self.stats.finished = True

    def _send(self, log: IO[str]) -> None:
        events_time = self.duration_s * self.speed
        start = datetime.now(UTC) - timedelta(seconds=events_time)
        count = round(self.rate * self.duration_s)
        events = generate_events(count, seed=self.seed, start=start, rate=self.rate / self.speed)
        config = FaultConfig(**DATA_FAULTS, seed=self.seed)  # type: ignore[arg-type]
        deadline = time.monotonic() + self.duration_s

        def messages() -> Any:
            for item in paced(inject(events, config, self.stats.counts), Pace(self.speed)):
                if self._halt.is_set() or time.monotonic() > deadline:
                    return
                message = item.message
                encoded = encode_value(message.value)
                entry = [message.tag, message.topic, event_id_of(message.value)]
                with self._lock:
                    log.write(json.dumps({"sent": [*entry, value_hash(encoded)]}) + "\n")
                    self.stats.sent += 1
                yield Message(self.prefix + message.topic, message.key, message.value, message.tag)

        def acknowledged(message: Message, metadata: Any) -> None:
            topic = message.topic.removeprefix(self.prefix)
            entry = [topic, metadata.partition, metadata.offset, message.tag]
            with self._lock:
                log.write(json.dumps({"ack": [*entry, event_id_of(message.value)]}) + "\n")

        def resolved(result: ProduceResult) -> None:
            self.stats.acknowledged = result.acknowledged
            self.stats.failed = result.failed
            log.flush()

        produce(
            self.bootstrap,
            messages(),
            raise_on_failure=False,
            batch_flush=50,
            on_resolved=resolved,
            on_acknowledged=acknowledged,
        )
        log.flush()


@dataclass(frozen=True)
class SoakLog:
    """The soak's log, read back: tag by value hash, and the acknowledged coordinates.

    :param tags: value hash -> tag (``event``, ``duplicate``, ``malformed:<reason>``...).
    :param acknowledged: ``(topic, partition, offset)`` -> ``(tag, event_id)`` of every
        acknowledged record (topics without the prefix).
    """

    tags: dict[str, str]
    acknowledged: dict[tuple[str, int, int], tuple[str, str | None]]


def read_log(path: Path) -> SoakLog:
    """Read a ``sent.jsonl``; a missing file is an empty log."""
    tags: dict[str, str] = {}
    acknowledged: dict[tuple[str, int, int], tuple[str, str | None]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "sent" in entry:
                tag, _, _, digest = entry["sent"]
                tags[digest] = tag
            else:
                topic, partition, offset, tag, event_id = entry["ack"]
                acknowledged[(topic, int(partition), int(offset))] = (tag, event_id)
    return SoakLog(tags, acknowledged)
