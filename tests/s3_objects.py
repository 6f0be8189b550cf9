"""Lists the objects under a prefix of an S3 bucket with boto3 (an S3 client independent of
ours) and prints one JSON object: key -> {size, sha256, last_modified}, plus the multipart
uploads still open under the prefix. With --abort-open, first aborts those uploads, as a
bucket's lifecycle rule (AbortIncompleteMultipartUpload) does.

usage: s3_objects.py ENDPOINT REGION BUCKET PREFIX [--abort-open] (credentials from
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)
"""
import hashlib
import json
import sys

import boto3
from botocore.config import Config

endpoint, region, bucket, prefix = sys.argv[1:5]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name=region,
    config=Config(s3={"addressing_style": "path"}),
)
if "--abort-open" in sys.argv[5:]:
    for upload in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
objects = {}
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for item in page.get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        objects[item["Key"]] = {
            "size": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "last_modified": item["LastModified"].isoformat(),
        }
open_uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
print(json.dumps({"objects": objects, "open_multipart": [u["Key"] for u in open_uploads]}))
