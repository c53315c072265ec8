"""The data source "quorumlog" and `register(spark)`."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .arrow import SCHEMA_DDL
from .options import parse_sink_options, parse_source_options
from .workers import ensure_worker_python


class QuorumLogDataSource(DataSource):
    """Rows: group string, index long, term long, pos long, body binary (normal entries only)."""

    @classmethod
    def name(cls) -> str:
        return "quorumlog"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from .reader import QuorumLogBatchReader

        return QuorumLogBatchReader(parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import QuorumLogStreamReader

        return QuorumLogStreamReader(parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import QuorumLogArrowWriter, check_sink_schema

        opts = parse_sink_options(self.options)
        check_sink_schema(schema, opts)
        return QuorumLogArrowWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import QuorumLogStreamArrowWriter, check_sink_schema

        opts = parse_sink_options(self.options)
        check_sink_schema(schema, opts)
        return QuorumLogStreamArrowWriter(opts)


def register(spark: Any) -> None:
    """Register the "quorumlog" format with a SparkSession, first making sure (workers.py) that its Python
    workers run an interpreter that imports quorumlog when that can be known and fixed from here."""
    ensure_worker_python(spark)  # before registering: the data source carries the interpreter to run
    spark.dataSource.register(QuorumLogDataSource)
