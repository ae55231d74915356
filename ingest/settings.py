"""Settings of the ingest API, read with ``ingest.config.load(IngestSettings, "ingest")``."""

from __future__ import annotations

import dataclasses

from ingest.contract import MAX_RECORD_BYTES


@dataclasses.dataclass(frozen=True)
class IngestSettings:
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers, host:port[,host:port...]
    ingest_host: str = "127.0.0.1"  # bind address of the API
    ingest_port: int = 18100  # port of the API
    # tenant -> bearer token; RATCHET_INGEST_TOKENS="acme=s3cret,beta=0ther"
    ingest_tokens: dict[str, str] = dataclasses.field(default_factory=dict)
    # one record, and the whole body of a single-record request
    ingest_max_record_bytes: int = MAX_RECORD_BYTES
    ingest_max_batch_bytes: int = 32 * 1024 * 1024  # the whole body of a JSONL batch
    ingest_max_batch_records: int = 5000  # records in one JSONL batch
    ingest_delivery_timeout_s: float = 10.0  # a produce not acknowledged by then is answered 503
    ingest_retry_after_s: int = 5  # the Retry-After of a 503
    # an idle keep-alive connection is closed after this; longer than clients keep theirs (httpx and
    # the OpenAI client: 5 s), or a request sent as the server closes the connection fails (ReadError)
    ingest_keep_alive_s: float = 75.0
