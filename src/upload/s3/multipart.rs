//! One file's upload: in one request below the part size, else multipart, with parts in
//! flight at once, each read and hashed on a blocking thread and recorded in the journal as
//! it completes; a restart sends again only the parts not recorded.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use object_store::ObjectStoreExt;
use object_store::PutPayload;
use object_store::multipart::PartId;
use object_store::path::Path as ObjectPath;
use sha2::{Digest, Sha256};

use super::{Bucket, UploadError};
use crate::store::files::hex;
use crate::upload::plan::{ObjectRecord, parts};

impl Bucket {
    /// Uploads `file` as `key`, its content to hash to `sha256` (hex). `record` is what the
    /// journal says of it (a multipart upload under way is resumed); `checkpoint` is called
    /// with the record each time a part completes (to be saved before more is recorded).
    /// `pace` is awaited after each request with the bytes it carried and when it began; for
    /// a part, as soon as it has begun (the next begins when its bytes are paid for), and once
    /// more with 0 bytes after the last.
    pub async fn upload_file<P, F, C>(
        &self,
        file: &Path,
        key: &str,
        sha256: &str,
        record: Option<ObjectRecord>,
        mut pace: P,
        mut checkpoint: C,
    ) -> Result<ObjectRecord, UploadError>
    where
        P: FnMut(u64, Instant) -> F,
        F: std::future::Future<Output = ()>,
        C: FnMut(&ObjectRecord) -> Result<(), UploadError>,
    {
        let local = |source| UploadError::Local {
            path: file.to_owned(),
            source,
        };
        let mut f = std::fs::File::open(file).map_err(local)?;
        let size = f.metadata().map_err(local)?.len();
        let location = ObjectPath::from(key);
        let changed = |got: String| UploadError::Changed {
            path: file.to_owned(),
            got,
            want: sha256.to_string(),
        };
        if size <= self.part_size {
            let mut bytes = Vec::with_capacity(size as usize);
            f.read_to_end(&mut bytes).map_err(local)?;
            let got = hex(&Sha256::digest(&bytes));
            if got != sha256 {
                return Err(changed(got));
            }
            let started = Instant::now();
            self.store
                .put(&location, PutPayload::from(bytes))
                .await
                .map_err(|e| self.classify(e))?;
            pace(size, started).await;
            return Ok(ObjectRecord::Done {
                key: key.to_string(),
                sha256: sha256.to_string(),
                size,
            });
        }
        // Multipart: resume the upload under way for this content, or begin one.
        let (upload_id, mut sent) = match record {
            Some(ObjectRecord::Multipart {
                sha256: s,
                size: z,
                upload_id,
                part_size,
                parts,
                ..
            }) if s == sha256 && z == size && part_size == self.part_size => (upload_id, parts),
            _ => {
                let id = self
                    .store
                    .create_multipart(&location)
                    .await
                    .map_err(|e| self.classify(e))?;
                (id, Vec::new())
            }
        };
        let plan = parts(size, self.part_size);
        sent.resize(plan.len(), None);
        let mut record = ObjectRecord::Multipart {
            key: key.to_string(),
            sha256: sha256.to_string(),
            size,
            upload_id: upload_id.clone(),
            part_size: self.part_size,
            parts: sent.clone(),
        };
        checkpoint(&record)?;
        // The file and the hash of what was read so far go to a blocking thread for each
        // part and come back with it: reading and hashing a part (milliseconds) never holds up
        // the runtime, which meanwhile keeps the parts in flight moving.
        let f = Arc::new(f);
        let mut hasher = Some(Sha256::new());
        let mut in_flight = FuturesUnordered::new();
        // A part completed: recorded before anything else is. A server that no longer has
        // the upload (expired, or aborted by a lifecycle rule while the vehicle was away)
        // never will: the next try begins a new one, never the same refusal for ever.
        let mut completed = |done: Result<(usize, u64, PartId), object_store::Error>,
                             record: &mut ObjectRecord|
         -> Result<(), UploadError> {
            let (index, len, part) = match done {
                Ok(done) => done,
                Err(e) => {
                    if matches!(e, object_store::Error::NotFound { .. }) {
                        checkpoint(&forgotten(record))?;
                    }
                    return Err(self.classify(e));
                }
            };
            if let ObjectRecord::Multipart { parts, .. } = record {
                parts[index] = Some(part.content_id);
            }
            checkpoint(record)?;
            tracing::debug!(key, part = index + 1, bytes = len, "part sent");
            Ok(())
        };
        for (index, (offset, len)) in plan.into_iter().enumerate() {
            let to_send = sent[index].is_none();
            // A free slot first, so that at most `parts_in_flight` parts are held.
            while to_send && in_flight.len() >= self.parts_in_flight {
                let done = in_flight.next().await.expect("parts in flight");
                completed(done, &mut record)?;
            }
            // Read into a buffer of its own, which the request takes: no copy. (A part sent
            // before a restart is read again only to be hashed.)
            let (file, mut hash) = (f.clone(), hasher.take().expect("the hash is back"));
            let reading = tokio::task::spawn_blocking(move || {
                let mut piece = vec![0; len as usize];
                file.read_exact_at(&mut piece, offset)?;
                hash.update(&piece);
                Ok::<_, std::io::Error>((piece, hash))
            });
            tokio::pin!(reading);
            let read = loop {
                tokio::select! {
                    read = &mut reading => break read,
                    Some(done) = in_flight.next() => completed(done, &mut record)?,
                }
            };
            let (piece, hash) = read
                .map_err(|e| local(std::io::Error::other(e)))?
                .map_err(local)?;
            hasher = Some(hash);
            if !to_send {
                continue;
            }
            let started = Instant::now();
            tracing::debug!(key, part = index + 1, bytes = len, "part begun");
            let (store, location, upload_id) =
                (self.store.clone(), location.clone(), upload_id.clone());
            in_flight.push(async move {
                store
                    .put_part(&location, &upload_id, index, PutPayload::from(piece))
                    .await
                    .map(|part| (index, len, part))
            });
            // The next part begins once this one's bytes are paid for; parts that complete
            // meanwhile are recorded.
            let paid = pace(len, started);
            tokio::pin!(paid);
            loop {
                tokio::select! {
                    () = &mut paid => break,
                    Some(done) = in_flight.next() => completed(done, &mut record)?,
                }
            }
        }
        while let Some(done) = in_flight.next().await {
            completed(done, &mut record)?;
        }
        drop(in_flight);
        pace(0, Instant::now()).await;
        let ObjectRecord::Multipart { parts: sent, .. } = &record else {
            unreachable!("a multipart record");
        };
        let got = hex(&hasher.expect("the hash is back").finalize());
        if got != sha256 {
            let _ = self.store.abort_multipart(&location, &upload_id).await;
            return Err(changed(got));
        }
        let parts: Vec<PartId> = sent
            .iter()
            .map(|content_id| PartId {
                content_id: content_id.clone().expect("every part completed"),
            })
            .collect();
        if let Err(e) = self
            .store
            .complete_multipart(&location, &upload_id, parts)
            .await
        {
            // A server that forgot the upload (expired, or completed before a crash cut our
            // record), or holds other parts than those recorded (a part a killed run had on
            // the way landed after): begin again with the next try, never the same refusal
            // for ever.
            let invalid_part = e.to_string().contains("InvalidPart");
            if matches!(e, object_store::Error::NotFound { .. }) || invalid_part {
                checkpoint(&forgotten(&record))?;
            }
            return Err(self.classify(e));
        }
        Ok(ObjectRecord::Done {
            key: key.to_string(),
            sha256: sha256.to_string(),
            size,
        })
    }
}

/// `record` of an upload the server no longer has: nothing of it to resume, so that the next
/// try begins a new one.
fn forgotten(record: &ObjectRecord) -> ObjectRecord {
    let mut record = record.clone();
    if let ObjectRecord::Multipart { sha256, parts, .. } = &mut record {
        sha256.clear();
        parts.clear();
    }
    record
}
