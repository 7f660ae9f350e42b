"""A local S3 object store: S3Proxy over a folder of the home, bound to 127.0.0.1, from the Maven jars.

The tests keep tables in it at ``s3a://`` URIs. Spark reaches it through Hadoop's s3a connector
(``spark_conf``, for the ``spark_conf`` setting), delta-rs and s3fs through the standard AWS variables
(``environment``), as they would a real bucket.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import requests
import s3fs

from infra import private_files, processes
from infra.deployment import JAR_CACHE, Deployment

NAME = "s3proxy"
#: S3Proxy signs like S3 and needs a region; any name does.
REGION = "us-east-1"
#: Warnings and errors only (its jar has no logging configuration: logback would log every request).
_LOGBACK = """<configuration>
  <appender name="log" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %level %logger{20} %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="log"/></root>
</configuration>
"""


@dataclass(frozen=True)
class LocalS3:
    port: int
    access_key: str
    secret_key: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spark_conf(self) -> dict[str, str]:
        """Spark settings that send every ``s3a://`` path here (path-style, plain HTTP, these keys)."""
        return {
            f"spark.hadoop.fs.s3a.{key}": value
            for key, value in {
                "endpoint": self.endpoint,
                "endpoint.region": REGION,
                "path.style.access": "true",
                "connection.ssl.enabled": "false",
                "access.key": self.access_key,
                "secret.key": self.secret_key,
                "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            }.items()
        }

    def environment(self) -> dict[str, str]:
        """The AWS variables by which delta-rs and s3fs find this store. (delta-rs commits with S3's
        conditional writes, ``If-None-Match``, which S3Proxy honours too: no lock is needed.)"""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, settings: Deployment, timeout: float = 60) -> None:
        """Start S3Proxy (no-op if it runs), its objects kept in ``<home>/s3proxy/objects``."""
        if processes.running_pid(settings, NAME) is None:
            processes.require_free(self.port, "S3Proxy")
            home = settings.home / NAME
            (home / "objects").mkdir(parents=True, exist_ok=True)
            private_files.write_private(
                home / "s3proxy.properties",
                "\n".join(
                    [
                        f"s3proxy.endpoint={self.endpoint}",
                        "s3proxy.authorization=aws-v2-or-v4",
                        f"s3proxy.identity={self.access_key}",
                        f"s3proxy.credential={self.secret_key}",
                        # jclouds' filesystem provider (deprecated for filesystem-nio2, which answers Hadoop's
                        # directory markers wrongly: s3a cannot create a Delta log there)
                        "jclouds.provider=filesystem",
                        f"jclouds.filesystem.basedir={home / 'objects'}",
                        "jclouds.identity=local",
                        "jclouds.credential=local",
                        "",
                    ]
                ),
            )
            (home / "logback.xml").write_text(_LOGBACK)
            processes.start(
                settings,
                NAME,
                [
                    "java",
                    "-Xmx256m",
                    f"-Dlogback.configurationFile={home / 'logback.xml'}",
                    "-cp",
                    str(JAR_CACHE / NAME / "*"),
                    "org.gaul.s3proxy.Main",
                    "--properties",
                    str(home / "s3proxy.properties"),
                ],
            )
        processes.wait_until(
            self._answers,
            timeout,
            "S3Proxy",
            log=processes.log_file(settings, NAME),
            alive=lambda: processes.running_pid(settings, NAME) is not None,
        )

    def _answers(self) -> bool:
        try:
            requests.get(self.endpoint, timeout=2)
            return True
        except requests.ConnectionError:
            return False

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (if missing); its ``s3a://`` URI."""
        store = s3fs.S3FileSystem(
            key=self.access_key,
            secret=self.secret_key,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": REGION},
        )
        with contextlib.suppress(FileExistsError):  # made before
            store.call_s3("create_bucket", Bucket=name)
        return f"s3a://{name}"

    def stop(self, settings: Deployment) -> bool:
        return processes.stop(settings, NAME)
