//! The merge: the SD log's stretch between two anchors and the stream's messages there, in
//! order, each message once, the SD log's own dropouts kept.

use std::collections::HashMap;

use super::Outcome;
use crate::fill::scan::DropoutSite;
use crate::ulog::message::{is_postflight, msg_type};

/// The site's messages between its anchors `i` and `j` merged in order with the SD log's
/// `stretch` between the same anchors: a message both have once, each one only one has in
/// its place (where neither tells, what the stream lost before what it has after it
/// resumed); the stream's dropouts left out, the SD log's kept. Without `i` (the head) the
/// site's messages from its first, without `j` (the tail) to its end. Messages of the split
/// before or after (a dropout at a split's edge) stay there: the SD log's copies of them
/// are left out.
pub(super) fn merge(
    site: &DropoutSite,
    i: Option<usize>,
    j: Option<usize>,
    stretch: &[Vec<u8>],
) -> Outcome {
    let lo = i.map_or(0, |i| i + 1).max(site.own.start);
    let hi = j.unwrap_or(site.messages.len()).min(site.own.end).max(lo);
    // The stream's messages, each with whether a dropout comes before it (the stream
    // resumed there).
    let mut ours: Vec<&[u8]> = Vec::new();
    let mut after_gap: Vec<bool> = Vec::new();
    let mut resumed = false;
    for m in &site.messages[lo..hi] {
        if m.bytes[2] == msg_type::DROPOUT {
            resumed = true;
        } else {
            ours.push(&m.bytes[..]);
            after_gap.push(resumed);
        }
    }
    // How often each of the stream's messages is still to come in it.
    let mut ours_ahead: HashMap<&[u8], usize> = HashMap::new();
    for m in &ours {
        *ours_ahead.entry(m).or_default() += 1;
    }
    // One set of post-flight records: the stream's, when it has them (the SD log's own,
    // of its logger's stop, left out).
    let ours_postflight = ours.iter().any(|m| is_postflight(m));
    // The other split's messages between the anchors, by how often each is there.
    let mut elsewhere: HashMap<&[u8], usize> = HashMap::new();
    let (a, b) = (i.map_or(0, |i| i + 1), j.unwrap_or(site.messages.len()));
    for (k, m) in site.messages.iter().enumerate().take(b).skip(a) {
        if !site.own.contains(&k) && m.bytes[2] != msg_type::DROPOUT {
            *elsewhere.entry(&m.bytes[..]).or_default() += 1;
        }
    }
    let stretch: Vec<&Vec<u8>> = stretch
        .iter()
        .filter(|m| !(ours_postflight && is_postflight(m) && !ours.contains(&&m[..])))
        .filter(|m| match elsewhere.get_mut(&m[..]) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect();
    // How often each message is still to come in the SD log's stretch.
    let mut ahead: HashMap<&[u8], usize> = HashMap::new();
    for m in &stretch {
        *ahead.entry(&m[..]).or_default() += 1;
    }
    let (mut a, mut b) = (0, 0);
    let mut records = Vec::new();
    let mut recovered = 0;
    let mut recovered_bytes = 0;
    let mut complete = true;
    loop {
        let take_sd = match (stretch.get(a), ours.get(b)) {
            (None, None) => break,
            (Some(sd), Some(our)) if &sd[..] == *our => {
                if let Some(n) = ours_ahead.get_mut(our) {
                    *n -= 1;
                }
                b += 1;
                true
            }
            // Ours comes later in the SD log: the SD log's message is one the stream lost.
            // Neither has the other's: after the stream resumed, what it lost comes first.
            (Some(sd), Some(our)) => {
                ahead.get(our).is_some_and(|n| *n > 0)
                    || (after_gap[b] && ours_ahead.get(&sd[..]).is_none_or(|n| *n == 0))
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if take_sd {
            let sd = stretch[a];
            a += 1;
            if let Some(n) = ahead.get_mut(&sd[..]) {
                *n -= 1;
            }
            records.extend_from_slice(sd);
            // (A message both have advanced `b` above.)
            if (b == 0 || ours.get(b - 1).is_none_or(|our| *our != &sd[..]))
                && sd[2] != msg_type::DROPOUT
            {
                recovered += 1;
                recovered_bytes += sd.len() as u64;
            }
            complete &= sd[2] != msg_type::DROPOUT;
        } else {
            // The stream has it, the SD log not (its own drop): kept.
            records.extend_from_slice(ours[b]);
            if let Some(n) = ours_ahead.get_mut(ours[b]) {
                *n -= 1;
            }
            b += 1;
        }
    }
    let from = match i {
        Some(i) if site.own.contains(&i) => {
            site.messages[i].offset + site.messages[i].bytes.len() as u64
        }
        _ => site
            .messages
            .get(site.own.start)
            .map_or(site.offset, |m| m.offset),
    };
    let to = match j {
        Some(j) if site.own.contains(&j) => site.messages[j].offset,
        _ => site.end,
    };
    Outcome::Filled {
        from,
        to,
        records,
        recovered,
        recovered_bytes,
        complete,
        edge: site.edge(),
    }
}
