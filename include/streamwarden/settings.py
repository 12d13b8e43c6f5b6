"""The stream's settings: environment (``STREAMWARDEN_*``) over an optional YAML file over defaults.

The environment names are a public contract used by compose files and operators (``docs/settings.md``, generated
from the model's fields). Invalid settings stop the program at start with one message naming the setting and the
allowed values (:class:`~streamwarden.settings_loading.SettingsError`); values that may hold secrets are never
echoed (:mod:`streamwarden.secrets`). :func:`load_settings` also refuses unknown variables and config-file keys
(:mod:`streamwarden.settings_loading`); the session handler is checked before Spark starts
(:func:`streamwarden.stream.runner.check_before_spark`).
"""

from __future__ import annotations

import json
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from streamwarden.paths import HomePaths, RunPaths
from streamwarden.settings_loading import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    OTHER_VARIABLES,
    SIBLING_ENV_PREFIXES,
    Duration,
    SettingsError,
    describe_validation_error,
    expanded_path,
    folder_problem,
    parse_string_map,
    read_config_file,
    unknown_names,
    validate_topic_name,
)
from streamwarden.storage import StoreUri, azure_account, parse_output_root
from streamwarden.wire import DEMO_SCHEMA, SchemaError, TableSchema

PARTITION_COLUMNS = ("topic", "date", "hour")
MAX_SESSION_BUCKETS = 65536
"""The most session buckets a checkpoint may have (``session_buckets``)."""
_MASTER = re.compile(r"^(local(\[(\*|[1-9]\d*)(,\d+)?\])?|spark://[\w.\-]+:\d+(,[\w.\-]+:\d+)*|yarn|k8s://\S+)$")
_HOST_PORT = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$")
SECRET_FIELDS = frozenset({"kafka_config", "spark_conf", "storage_options"})
"""Settings whose values may hold credentials: never echoed in an error, a repr or a log line."""
SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
"""The Spark setting a ``spark_conf`` may name over ``shuffle_partitions`` (see ``state_partitions``)."""
MAX_PARTITIONS = 10_000
"""The most shuffle (and state) partitions: each is a state store and a task in every micro-batch."""


class Settings(BaseSettings):
    """Everything the stream, the CLI and the DAGs need to agree on."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    home: Path = Field(Path(".streamwarden"), description="Base folder for the default roots below (output, "
                                              "checkpoint, state, run).")
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port...].")
    kafka_config: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, repr=False,
        description="Extra librdkafka settings of every client (security.protocol, sasl.*, ssl.*), JSON; passed "
        "through unchanged (trusted operator configuration) and never echoed.",
    )
    topic_pattern: str = Field("sites-.*", min_length=1, description="Regex of the topics to read (full match).")
    control_topic: str = Field("streamwarden-control", description="Topic of the commands to the collection sites "
                                                       "(restart_session); the topic pattern must not match it.")
    output_root: Path | str | None = Field(
        None, description="Where the Delta tables land (unset: <home>/output): a path every Spark node sees, or an "
              "object-store URI (s3://, s3a://, gs://, az://, abfss://; README, 'Output on an object store').")
    checkpoint_root: Path | None = Field(None, description="Spark checkpoints and the lease (unset: "
                                               "<home>/checkpoint).")
    state_root: Path | None = Field(None, description="Local state-store scratch space (unset: <home>/state).")
    run_root: Path | None = Field(
        None, description="Heartbeat, stop marker, failure documents, alerts, logs (unset: <home>/run)."
    )
    trigger_interval: Duration = Field(
        3.0, description="Micro-batch trigger interval (3s, 500ms, 2m). At half its top rate the stream's p95 "
             "latency is about 1.45 x this plus the fixed cost of a batch (docs/tuning.md).")
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Cap on records per micro-batch, spread fairly over partitions (unset: unlimited). "
                            "The first batch after a start reads fewer (the source's FIRST_BATCH_RECORDS), so "
                            "a start with a backlog commits within seconds."
    )
    integrity_tier: Literal["none", "fuzzy", "strict"] = Field("strict", description="How hard to check input: none "
                                                                         "applies what arrives; fuzzy quarantines an "
                                                                         "event later than its session's latest "
                                                                         "event time minus the lateness "
                                                                         "(LATE_EVENT); strict checks every sequence "
                                                                         "number (see on_gap; docs/sessions.md).")
    spark_master: str = Field("local[*]", description="local[N], local[*], spark://host:port, yarn or k8s://...")
    starting_offsets: str = Field(
        "earliest", description="earliest, latest, or JSON {topic: {partition: offset}} (new checkpoints only)."
    )
    fail_on_data_loss: bool = Field(True, description="Fail with DATA_LOSS when offsets the checkpoint expects have "
                                          "expired from the broker.")
    source_impl: Literal["python", "jvm"] = Field(
        "python", description="python: the bundled Python data source; jvm: Spark's spark-sql-kafka connector."
    )
    high_watermark_source: Literal["fetch", "list_offsets"] = Field(
        "fetch",
        description="fetch: read the high watermark from a fetch response (right on every broker); list_offsets: "
        "trust ListOffsets(latest) (cheaper, Apache Kafka only).",
    )
    output_compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = Field("zstd", description="Parquet "
                                                                                         "compression of the output "
                                                                                         "tables' files.")
    output_partition_by: Annotated[tuple[str, ...], NoDecode] = Field(
        PARTITION_COLUMNS, description="Folder partitioning of the output: any of topic, date, hour."
    )
    query_name: str = Field("streamwarden", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Name of the query; also "
                                                                              "names its checkpoint and lease (1-64 "
                                                                              "of A-Z a-z 0-9 _ -).")
    shuffle_partitions: int | None = Field(
        None, gt=0, le=MAX_PARTITIONS, description="Spark's shuffle partitions, which a new checkpoint pins as its "
                                       "state's (unset: one per core of a local[N] master, so each batch runs its "
                                       "stateful tasks in one wave; 8 on a cluster; spark.sql.shuffle.partitions in "
                                       "the Spark conf, when given, wins, as it does in Spark); an existing "
                                       "checkpoint keeps the number it started with.")
    storage_options: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, repr=False,
        description="Options of the output tables' object store for the driver (delta-rs and pyarrow), JSON; never "
        "echoed.")
    spark_conf: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, repr=False, description="Extra Spark configuration, JSON. spark.driver.memory (default "
                                          "640m, the heap of the driver, which on a local[N] master does the work) "
                                          "reaches spark-submit as SPARK_DRIVER_MEMORY (a Spark connection's "
                                          "--driver-memory wins). The driver's JVM runs its quick compiler only and "
                                          "the serial collector, its heap committed whole and touched at start "
                                          "(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+AlwaysPreTouch -Xms<driver "
                                          "memory> in SPARK_SUBMIT_OPTS; docs/tuning.md): an operator's own "
                                          "SPARK_SUBMIT_OPTS replaces them, and spark.driver.extraJavaOptions may "
                                          "add flags but not another collector (the JVM refuses two). Never echoed.")
    read_timeout: Duration = Field(120.0, description="Longest a reader waits for a planned offset.")
    watermark_timeout: Duration = Field(
        4.0, gt=0, description="Longest a trigger waits for the broker's watermarks; an unanswered partition is "
                   "planned up to ListOffsets' end (a lower bound) and asked again at the next trigger.")
    broker_timeout: Duration = Field(
        300.0, gt=0, description="How long the broker may leave the stream's queries unanswered (each trigger plans "
                     "nothing new meanwhile) before the stream fails with ENVIRONMENT.")
    max_read_tasks: int | None = Field(
        None, ge=0, description="At most this many Spark tasks read Kafka per batch, topic-partitions packed by "
                    "records (0: one per topic-partition; unset: one per core of a local[N] master, 8 on a cluster: "
                    "each task pays a consumer's start and first fetch)."
    )
    pipeline: Literal["sessions", "records"] = Field(
        "sessions", description="sessions: rebuild snapshot/update sessions (tables session_rows and quarantine); "
                    "records: land the raw Kafka records (table records)."
    )
    table_schema: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: {k: str(v) for k, v in DEMO_SCHEMA.to_dict().items()},
        description="Typed columns of a session table, JSON {name: string|long|double|boolean|timestamp}.",
    )
    session_handler: str = Field(
        "streamwarden.stream.sessions.table_handler:TableReconstruction",
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="package.module:Class of the session handler: code the stream imports and runs on the driver and "
        "every executor (docs/sessions.md).",
    )
    on_gap: Literal["fail", "resync"] = Field(
        "fail", description="strict tier: fail the job, or resync (quarantine the session until its next snapshot)."
    )
    malformed_policy: Literal["quarantine", "fail"] = Field(
        "quarantine", description="Undecodable records: quarantine them, or fail with MALFORMED."
    )
    lateness: Duration = Field(
        300.0, description="fuzzy tier: how far behind its session's event time an event may arrive.")
    session_timeout: Duration = Field(3600.0, description="The state of a session silent this long is released "
                                              "(RocksDB TTL, and per session within a slot).")
    max_message_bytes: int = Field(1024 * 1024, gt=0, description="Larger values go to quarantine as OVERSIZED.")
    session_buckets: int | None = Field(
        None, gt=0, le=MAX_SESSION_BUCKETS,
        description="A new checkpoint hashes sessions into this many groups, one stateful call per group and batch "
        "(unset: 8 per state partition, 16 on 2 cores, 64 on a cluster); a checkpoint keeps the number it started "
        "with when this is unset, and refuses another one when it is set.",
    )
    session_slots: int = Field(
        64, ge=0, le=65536,
        description="A new checkpoint keeps each group's sessions in this many state entries, a batch reading and "
        "writing the touched ones whole (0: one entry per session, the layout of checkpoints from before slots); a "
        "checkpoint keeps the layout it started with (docs/sessions.md).",
    )
    log_max_bytes: int = Field(
        50 * 1024 * 1024, ge=1024,
        description="A log under <run_root>/logs rolls over at this size (bytes, at least 1024).")
    log_backups: int = Field(
        5, ge=1, le=1000, description="Rolled-over files kept per log; also the earlier launch logs kept (1-1000).")
    log_max_age: Duration = Field(
        7 * 86400.0, description="Rolled-over files and launch logs last written longer ago than this are deleted "
                     "(12h, 7d).")
    log_py4j: bool = Field(
        False, description="Keep py4j's INFO lines (one per call between the job's Python and its JVM) in the job's "
               "log.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

    @field_validator("table_schema", mode="before")
    @classmethod
    def _table_schema(cls, value: Any) -> dict[str, str]:
        try:
            return dict(TableSchema.parse(value).to_dict())
        except SchemaError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("kafka_config", "spark_conf", "storage_options", mode="before")
    @classmethod
    def _string_map(cls, value: Any) -> dict[str, str]:
        return parse_string_map(value)

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf(cls, value: dict[str, str]) -> dict[str, str]:
        partitions = value.get(SHUFFLE_PARTITIONS_KEY)
        if partitions is not None and not (partitions.strip().isdigit() and 0 < int(partitions) <= MAX_PARTITIONS):
            raise ValueError(f"{SHUFFLE_PARTITIONS_KEY} must be a whole number from 1 to {MAX_PARTITIONS:,}, not "
                             f"{partitions!r}")
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        servers = value.split(",")
        for server in servers:
            match = _HOST_PORT.match(server.strip())
            if not match or not 0 < int(match.group(1)) < 65536:
                raise ValueError(f"{server.strip()!r} is not host:port; expected host:port[,host:port...]")
        return ",".join(s.strip() for s in servers)

    @field_validator("home", "output_root", "checkpoint_root", "state_root", "run_root", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        if value is not None and not str(value).strip():
            raise ValueError("must not be empty (an empty path would mean the current folder)")
        return value

    @field_validator("output_root", mode="before")
    @classmethod
    def _output_root(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            return value  # a Path, None, or empty (refused by _path)
        parsed = parse_output_root(value)
        return str(parsed) if isinstance(parsed, StoreUri) else parsed

    @field_validator("topic_pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    @field_validator("control_topic")
    @classmethod
    def _control_topic(cls, value: str) -> str:
        return validate_topic_name(value)

    @model_validator(mode="after")
    def _control_apart(self) -> Settings:
        if re.fullmatch(self.topic_pattern, self.control_topic):
            raise ValueError(f"{ENV_PREFIX}TOPIC_PATTERN {self.topic_pattern!r} matches the control topic "
                             f"{self.control_topic!r} ({ENV_PREFIX}CONTROL_TOPIC): the stream would read commands "
                             "as data. Narrow the pattern or rename the control topic.")
        return self

    @property
    def read_tasks(self) -> int:
        """How many Spark tasks read Kafka per batch at most: ``max_read_tasks``, or when unset one per core of
        a local master (each task pays a consumer's start and first fetch, ~0.2 s measured here, so one wave
        of tasks is fastest: 2 tasks read 100k records 15% faster than 8 on 2 cores), 8 on a cluster."""
        if self.max_read_tasks is not None:
            return self.max_read_tasks
        return self._local_cores or 8

    @property
    def state_partitions(self) -> int:
        """Spark's shuffle partitions, which a new checkpoint pins as its state's: ``shuffle_partitions``, or when
        unset one per core of a local master, 8 on a cluster: one wave of stateful tasks per batch is fastest
        (docs/tuning.md). A checkpoint keeps the number it started with
        (Spark restores it from the offset log, whatever this says). ``spark.sql.shuffle.partitions`` in
        ``spark_conf`` is what Spark is given (:func:`~streamwarden.stream.spark_session.spark_conf`), so it
        wins here too: the session buckets' labels are balanced for the partitions Spark really uses."""
        if SHUFFLE_PARTITIONS_KEY in self.spark_conf:
            return int(self.spark_conf[SHUFFLE_PARTITIONS_KEY])
        if self.shuffle_partitions is not None:
            return self.shuffle_partitions
        return self._local_cores or 8

    @property
    def state_buckets(self) -> int:
        """The session buckets of a new checkpoint: ``session_buckets``, or when unset 8 per state partition. A
        batch pays a few round trips to the state server and two pandas frames per bucket it touches (a
        partition's buckets are its calls of the stateful function; docs/tuning.md). A checkpoint keeps the number
        it started with (pinned with the handler, :func:`~streamwarden.runfiles.handler_pin.pin_handler`)."""
        return self.session_buckets if self.session_buckets is not None else 8 * self.state_partitions

    @property
    def _local_cores(self) -> int | None:
        """The cores of a ``local``/``local[N]``/``local[*]`` master (``*``: this machine's); ``None`` on a cluster."""
        local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", self.spark_master)
        if local is None:
            return None
        return (os.cpu_count() or 1) if local[1] == "*" else int(local[1] or 1)

    @field_validator("spark_master")
    @classmethod
    def _master(cls, value: str) -> str:
        if not _MASTER.match(value):
            raise ValueError("allowed: local, local[N], local[*], spark://host:port, yarn, k8s://...")
        return value

    @field_validator("starting_offsets")
    @classmethod
    def _starting(cls, value: str) -> str:
        if value in {"earliest", "latest"}:
            return value
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError("allowed: earliest, latest, or JSON {topic: {partition: offset}}") from exc
        if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(parts, dict) and all(isinstance(o, int) and not isinstance(o, bool) for o in parts.values())
            for parts in parsed.values()
        ):
            raise ValueError("JSON must map topic -> {partition: offset}, offsets as integers")
        for topic, parts in parsed.items():
            validate_topic_name(topic)
            for partition, offset in parts.items():
                if not str(partition).isdigit():
                    raise ValueError(f"topic {topic!r}: partition {partition!r} is not a partition number")
                if offset < -2:
                    raise ValueError(f"topic {topic!r} partition {partition}: offset {offset} is below -2 "
                                     "(-2 earliest, -1 latest, else an offset >= 0)")
        return value

    @field_validator("output_partition_by", mode="before")
    @classmethod
    def _partition_by(cls, value: Any) -> tuple[str, ...]:
        items = tuple(v.strip() for v in value.split(",") if v.strip()) if isinstance(value, str) else tuple(value)
        unknown = [v for v in items if v not in PARTITION_COLUMNS]
        if unknown:
            raise ValueError(f"unknown column(s) {unknown}; allowed: {', '.join(PARTITION_COLUMNS)}")
        if len(set(items)) != len(items):
            raise ValueError(f"a column is named twice in {','.join(items)}")
        return items

    @model_validator(mode="after")
    def _roots(self) -> Settings:
        home = expanded_path(self.home, "home").absolute()
        folders = ["home"]
        for name in ("output_root", "checkpoint_root", "state_root", "run_root"):
            value = getattr(self, name)
            if isinstance(value, str):  # an object-store URI, normalized by _output_root
                continue
            resolved = (home / name.removesuffix("_root")) if value is None else expanded_path(Path(value), name)
            object.__setattr__(self, name, resolved.absolute())
            folders.append(name)
        object.__setattr__(self, "home", home)
        problems = [f"invalid setting {ENV_PREFIX}{name.upper()}={str(getattr(self, name))!r}: {problem}"
                    for name in folders if (problem := folder_problem(getattr(self, name)))]
        output = self.output_location
        if isinstance(output, StoreUri) and output.scheme == "az" and azure_account(self.storage_options) is None:
            problems.append(f"invalid setting {ENV_PREFIX}OUTPUT_ROOT={str(output)!r}: az:// needs the account: "
                            f"give azure_storage_account_name in {ENV_PREFIX}STORAGE_OPTIONS, or write the root "
                            "as abfss://<container>@<account>.dfs.core.windows.net/<folder>")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # Derived locations (one place decides every path the job, the CLI and the warden use).
    def root(self, name: Literal["output", "checkpoint", "state", "run"]) -> Path:
        """A configured local root; always set after validation (the output root only when it is local)."""
        value = getattr(self, f"{name}_root")
        if not isinstance(value, Path):
            raise ValueError(f"{ENV_PREFIX}{name.upper()}_ROOT is {value!r}, not a local folder; "
                             "the output root's location is Settings.output_location")
        return value

    @cached_property
    def output_location(self) -> Path | StoreUri:
        """The output root: a local folder, or a folder on an object store."""
        value = self.output_root
        return parse_output_root(value) if isinstance(value, str) else self.root("output")

    @cached_property
    def checkpoint_location(self) -> Path:
        """The Spark checkpoint folder of the query."""
        return self.root("checkpoint") / self.query_name

    @cached_property
    def lease_path(self) -> Path:
        """The single-instance lease on the checkpoint."""
        return self.root("checkpoint") / f"{self.query_name}.lease"

    @cached_property
    def standby_lease_path(self) -> Path:
        """The warm standby's lease: one standby per checkpoint, held while it waits for the stream's lease."""
        return self.root("checkpoint") / f"{self.query_name}.standby"

    @cached_property
    def run_paths(self) -> RunPaths:
        """The files and folders under the run root."""
        return RunPaths(self.root("run"))

    @cached_property
    def home_paths(self) -> HomePaths:
        """The files and folders ``up`` keeps under the home."""
        return HomePaths(self.home)

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings shared by every client (bootstrap plus security passthrough)."""
        return {**self.kafka_config, "bootstrap.servers": self.bootstrap_servers}

    def to_env(self) -> dict[str, str]:
        """The settings as ``STREAMWARDEN_*`` variables, for child processes."""
        env: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, dict):
                text = json.dumps(value, sort_keys=True)
            elif isinstance(value, tuple):
                text = ",".join(value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = str(value)
            env[f"{ENV_PREFIX}{name.upper()}"] = text
        return env


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment (and YAML), raising :class:`SettingsError` on invalid input.

    A ``STREAMWARDEN_*`` variable or config-file key that names no setting is refused (with the closest
    name), so a typo never silently leaves a default in force.
    """
    fields = set(Settings.model_fields)
    known = {f"{ENV_PREFIX}{name.upper()}" for name in fields} | OTHER_VARIABLES
    variables = [name for name in os.environ
                 if name.startswith(ENV_PREFIX) and not name.startswith(SIBLING_ENV_PREFIXES)]
    problems = unknown_names(variables, known, "environment variable")
    problems += unknown_names(list(read_config_file()), fields, f"key in {CONFIG_FILE_ENV}")
    if problems:
        raise SettingsError("\n".join(problems))
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_validation_error(exc, secrets=SECRET_FIELDS)) from None


