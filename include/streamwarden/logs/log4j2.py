"""The stream driver JVM's log4j2 configuration: a size-rolled file kept to a count and an age; WARN on the console."""

from __future__ import annotations

import math
import os
from pathlib import Path

from streamwarden.logs.bounds import JVM_LOG, LogBounds

CONFIG_FILE = "log4j2-stream.properties"
PATTERN = "%d{yyyy-MM-dd HH:mm:ss.SSS} %p %c{1}: %m%n%ex"
QUIET_LOGGERS = ("py4j", "org.sparkproject.jetty", "org.apache.parquet", "parquet", "org.apache.hadoop")
"""Loggers kept at WARN: per-call or per-file INFO lines that say nothing about the stream."""


def render_log4j2_properties(bounds: LogBounds) -> str:
    """log4j2 properties: INFO and above to ``<logs>/stream.jvm.log``, rolled over at ``max_bytes``, ``backups``
    rolled-over files kept (older ones and any past ``max_age`` deleted at each rollover); WARN and above also
    to the console (the launch log)."""
    log = bounds.folder / JVM_LOG
    age_seconds = max(1, math.ceil(bounds.max_age))
    lines = [
        "status = warn",
        "name = streamwarden-stream",
        "",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = {PATTERN}",
        "appender.console.filter.threshold.type = ThresholdFilter",
        "appender.console.filter.threshold.level = warn",
        "",
        "appender.rolling.type = RollingFile",
        "appender.rolling.name = rolling",
        f"appender.rolling.fileName = {log}",
        f"appender.rolling.filePattern = {log}.%i",
        "appender.rolling.filePermissions = rw-------",
        "appender.rolling.layout.type = PatternLayout",
        f"appender.rolling.layout.pattern = {PATTERN}",
        "appender.rolling.policies.type = Policies",
        "appender.rolling.policies.size.type = SizeBasedTriggeringPolicy",
        f"appender.rolling.policies.size.size = {bounds.max_bytes} B",
        "appender.rolling.strategy.type = DefaultRolloverStrategy",
        "appender.rolling.strategy.fileIndex = min",
        f"appender.rolling.strategy.max = {bounds.backups}",
        "appender.rolling.strategy.delete.type = Delete",
        f"appender.rolling.strategy.delete.basePath = {bounds.folder}",
        "appender.rolling.strategy.delete.maxDepth = 1",
        "appender.rolling.strategy.delete.name.type = IfFileName",
        f"appender.rolling.strategy.delete.name.glob = {JVM_LOG}.*",
        "appender.rolling.strategy.delete.name.any.type = IfAny",
        "appender.rolling.strategy.delete.name.any.age.type = IfLastModified",
        f"appender.rolling.strategy.delete.name.any.age.age = PT{age_seconds}S",
        "appender.rolling.strategy.delete.name.any.count.type = IfAccumulatedFileCount",
        f"appender.rolling.strategy.delete.name.any.count.exceeds = {bounds.backups}",
        "",
        "rootLogger.level = info",
        "rootLogger.appenderRef.console.ref = console",
        "rootLogger.appenderRef.rolling.ref = rolling",
    ]
    for index, name in enumerate(QUIET_LOGGERS):
        lines += [f"logger.quiet{index}.name = {name}", f"logger.quiet{index}.level = warn"]
    return "\n".join(lines) + "\n"


def write_log4j2_config(bounds: LogBounds) -> Path:
    """Write the configuration into the logs folder (the owner's only) and return its path."""
    bounds.folder.mkdir(parents=True, exist_ok=True)
    path = bounds.folder / CONFIG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(render_log4j2_properties(bounds))
    return path
