//! The bucket's URL, credentials and endpoint, and the server's refusals read as the
//! operator needs them.

use super::errors::no_bucket_message;
use super::*;

#[test]
fn the_url_names_bucket_and_prefix() {
    assert_eq!(parse_url("s3://logs").unwrap(), ("logs".into(), "".into()));
    assert_eq!(
        parse_url("s3://logs/fleet/a/").unwrap(),
        ("logs".into(), "fleet/a".into())
    );
    assert!(parse_url("logs/fleet").is_err());
    assert!(parse_url("s3:///fleet").is_err());
}

#[test]
fn credentials_come_from_the_default_profile() {
    let text = "[other]\naws_access_key_id = X\naws_secret_access_key = Y\n\n[default]\n\
                aws_access_key_id = GK1\naws_secret_access_key = s3cr3t\n";
    assert_eq!(
        parse_credentials(text),
        Some(("GK1".into(), "s3cr3t".into(), None))
    );
    assert_eq!(
        parse_credentials("[default]\naws_access_key_id = A\n"),
        None
    );
}

/// The error text object_store gives for a refused request: its words, then the body.
fn client_error(body: &str) -> String {
    format!(
        "Error performing PUT http://10.0.0.5:3900/fleet/x.ulg in 4ms - Server returned \
         non-2xx status code: 404 Not Found: {body}"
    )
}

#[test]
fn the_server_s_code_message_and_bucket_are_read_from_its_error_body() {
    // Garage names the bucket in its message only.
    let garage = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket\
                  </Code><Message>Bucket not found: fleet</Message><Resource>/fleet/x.ulg\
                  </Resource><Region>garage</Region></Error>";
    let said = ServerSaid::from_client_error(&client_error(garage));
    assert_eq!(said.code.as_deref(), Some("NoSuchBucket"));
    assert_eq!(said.message.as_deref(), Some("Bucket not found: fleet"));
    assert_eq!(said.bucket.as_deref(), Some("fleet"));
    assert!(said.client.ends_with("404 Not Found"), "{}", said.client);
    // AWS and MinIO name it in a field of its own; entities are decoded.
    let aws = "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist\
               </Message><Key>a&amp;b.ulg</Key><BucketName>logs</BucketName></Error>";
    let said = ServerSaid::from_client_error(&client_error(aws));
    assert_eq!(said.bucket.as_deref(), Some("logs"));
    assert_eq!(said.key.as_deref(), Some("a&b.ulg"));
    assert_eq!(
        said.to_string(),
        format!(
            "NoSuchKey (The specified key does not exist), bucket logs, key a&b.ulg [{}]",
            said.client
        )
    );
    // No body: the client's words as they are.
    let bare = ServerSaid::from_client_error("connection refused");
    assert_eq!(bare.code, None);
    assert_eq!(bare.to_string(), "connection refused");
}

#[test]
fn a_bucket_the_server_read_from_the_wrong_place_is_said_with_the_option_to_change() {
    let body = "<Error><Code>NoSuchBucket</Code><Message>Bucket not found: fleet</Message>\
                </Error>";
    let said = ServerSaid::from_client_error(&client_error(body));
    let wrong_place = no_bucket_message("flightlogs", &said, false);
    assert!(
        wrong_place.contains("looked for bucket fleet, but --upload-to names bucket flightlogs"),
        "{wrong_place}"
    );
    assert!(
        wrong_place.contains("drop --upload-virtual-hosted"),
        "{wrong_place}"
    );
    assert!(
        wrong_place.contains("Bucket not found: fleet"),
        "{wrong_place}"
    );
    let missing = no_bucket_message("fleet", &said, true);
    assert!(missing.contains("has no bucket fleet"), "{missing}");
    assert!(missing.contains("--upload-to"), "{missing}");
    assert!(missing.contains("--upload-endpoint"), "{missing}");
}

#[test]
fn path_style_is_the_default_for_an_endpoint_and_virtual_hosting_puts_the_bucket_in_the_host() {
    assert!(S3Options::path_style_by_default(Some(
        "http://10.0.0.5:3900"
    )));
    assert!(!S3Options::path_style_by_default(None));
    assert_eq!(
        bucket_endpoint("http://garage.local:3900", "logs").unwrap(),
        "http://logs.garage.local:3900"
    );
    assert_eq!(
        bucket_endpoint("https://logs.s3.example.com/", "logs").unwrap(),
        "https://logs.s3.example.com"
    );
    assert!(bucket_endpoint("garage.local:3900", "logs").is_err());
}
