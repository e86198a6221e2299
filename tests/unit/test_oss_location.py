"""oss_location: an ``oss://`` URI checked and split once, for every caller, and a region's endpoints."""

from __future__ import annotations

import pytest

from aliyun_training.oss_location import OssLocation, oss_endpoint, parse_oss_uri
from aliyun_training.validation import SpecError


def test_a_prefix_always_ends_with_a_slash_so_one_version_never_matches_another() -> None:
    location = parse_oss_uri("oss://ml-data/cifar10/v1")

    assert location == OssLocation("ml-data", "cifar10/v1/")
    assert location.uri == "oss://ml-data/cifar10/v1/"
    assert not "cifar10/v10/data.npz".startswith(location.prefix)
    assert parse_oss_uri("oss://ml-data//cifar10/v1//").prefix == "cifar10/v1/"


def test_a_uri_naming_the_buckets_endpoint_splits_into_bucket_and_endpoint() -> None:
    location = parse_oss_uri("oss://ml-data.oss-cn-wulanchabu-internal.aliyuncs.com/cifar10/v1/")

    assert (location.bucket_name, location.endpoint) == ("ml-data", "oss-cn-wulanchabu-internal.aliyuncs.com")
    assert parse_oss_uri("oss://ml-data/cifar10/").endpoint == ""


@pytest.mark.parametrize(
    ("uri", "problem", "fix"),
    [
        ("s3://ml-data/cifar10/", "is not an OSS URI", "use oss://bucket/prefix/"),
        ("oss:///cifar10/", "is not an OSS URI", "use oss://bucket/prefix/"),
        ("oss://ml-data/cifar10/v1?x=1", "contains '?', '#' or ';'", "rename the folder without them"),
        ("oss://ml-data/", "names a whole bucket", "point at the version's folder"),
        ("oss://ml-data/cifar10/../secrets/", "contains '..'", "use the folder's plain key prefix"),
        ("oss://ML_Data/cifar10/", "is not an OSS bucket name", "3 to 63 lower-case letters"),
        ("oss://ab/cifar10/", "is not an OSS bucket name", "3 to 63 lower-case letters"),
        ("oss://ml-data.example.com/cifar10/", "is not an OSS endpoint", "oss-<region>[-internal]"),
    ],
)
def test_a_bad_uri_is_refused_naming_the_field_the_problem_and_the_fix(
    uri: str, problem: str, fix: str
) -> None:
    with pytest.raises(SpecError) as refused:
        parse_oss_uri(uri, field="staging.source_uri")

    message = str(refused.value)
    found, _, given_fix = message.partition(" (fix: ")
    assert found.startswith("staging.source_uri: ") and problem in found, message
    assert fix in given_fix, message


def test_a_regions_endpoint_is_public_unless_asked_for_the_internal_one() -> None:
    assert oss_endpoint("cn-wulanchabu") == "oss-cn-wulanchabu.aliyuncs.com"
    assert oss_endpoint("cn-wulanchabu", internal=True) == "oss-cn-wulanchabu-internal.aliyuncs.com"
    internal = f"oss://ml-data.{oss_endpoint('cn-beijing', internal=True)}/cifar10/"
    assert parse_oss_uri(internal).endpoint == "oss-cn-beijing-internal.aliyuncs.com", (
        "its own endpoints pass"
    )
