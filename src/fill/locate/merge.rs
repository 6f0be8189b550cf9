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
    if site.window.is_some() {
        return merge_window(site, stretch);
    }
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

/// An event buffer's window: the SD log's `stretch` (the window's records, in the SD log's
/// order) with the stream's messages it lacks (its own drops) each after the SD log's copy of
/// the stream's message before it. The stream's messages are no guide to the order here: the
/// buffer wrote the samples it held when the event came, after the syncs and dropouts that
/// had come meanwhile, so a sequence merge would take a held sample for one the SD log has
/// further on, and keep it twice.
fn merge_window(site: &DropoutSite, stretch: &[Vec<u8>]) -> Outcome {
    let ours: Vec<&[u8]> = site.messages[site.own.clone()]
        .iter()
        .map(|m| &m.bytes[..])
        .filter(|m| m[2] != msg_type::DROPOUT)
        .collect();
    // Where each of the SD log's messages is, by its bytes: the copies not yet matched.
    let mut positions: HashMap<&[u8], std::collections::VecDeque<usize>> = HashMap::new();
    for (k, m) in stretch.iter().enumerate() {
        positions.entry(&m[..]).or_default().push_back(k);
    }
    let mut matched = vec![false; stretch.len()];
    // The stream's messages the SD log lacks, each after the SD log's message `k` (`None`:
    // before its first).
    let mut inserted: Vec<(Option<usize>, &[u8])> = Vec::new();
    let mut last: Option<usize> = None;
    for m in &ours {
        match positions.get_mut(m).and_then(|p| p.pop_front()) {
            Some(k) => {
                matched[k] = true;
                last = Some(last.map_or(k, |l| l.max(k)));
            }
            None => inserted.push((last, m)),
        }
    }
    let mut records = Vec::new();
    let (mut recovered, mut recovered_bytes, mut complete) = (0, 0, true);
    let mut extra = inserted.iter().peekable();
    while let Some((_, m)) = extra.next_if(|(at, _)| at.is_none()) {
        records.extend_from_slice(m);
    }
    for (k, sd) in stretch.iter().enumerate() {
        records.extend_from_slice(sd);
        if !matched[k] && sd[2] != msg_type::DROPOUT {
            recovered += 1;
            recovered_bytes += sd.len() as u64;
        }
        complete &= sd[2] != msg_type::DROPOUT;
        while let Some((_, m)) = extra.next_if(|(at, _)| *at == Some(k)) {
            records.extend_from_slice(m);
        }
    }
    // (Inserted in the order of `last`, which only grows: none is left.)
    Outcome::Filled {
        from: site
            .messages
            .get(site.own.start)
            .map_or(site.offset, |m| m.offset),
        to: site.end,
        records,
        recovered,
        recovered_bytes,
        complete,
        edge: site.edge(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fill::scan::Placed;

    fn sample(t: u8) -> Vec<u8> {
        vec![10, 0, msg_type::DATA, 2, 0, t, 0, 0, 0, 0, 0, 0, 0]
    }
    const SYNC: [u8; 11] = [
        8,
        0,
        msg_type::SYNC,
        0x2f,
        0x73,
        0x13,
        0x20,
        0x25,
        0x0c,
        0xbb,
        0x12,
    ];
    const DROPOUT: [u8; 5] = [2, 0, msg_type::DROPOUT, 40, 0];

    fn window_site(messages: &[&[u8]]) -> DropoutSite {
        let mut offset = 100;
        let messages: Vec<Placed> = messages
            .iter()
            .map(|m| {
                let placed = Placed {
                    bytes: m.to_vec(),
                    offset,
                };
                offset += m.len() as u64;
                placed
            })
            .collect();
        DropoutSite {
            split: "esc/split_0000.ulg".into(),
            offset: 100,
            own: 0..messages.len(),
            messages,
            before: Vec::new(),
            after: Vec::new(),
            before_us: 0,
            last_before_us: 10,
            after_us: None,
            end: offset,
            starts_flight: false,
            ends_flight: false,
            window: Some([0, 10]),
        }
    }

    #[test]
    fn a_window_holds_each_record_once_though_the_buffer_wrote_held_samples_after_the_syncs() {
        // The buffer wrote samples 1 and 2 as it held them, when the event came: after the
        // sync and the dropout that came meanwhile. The link lost sample 3; the SD log has
        // every record in its order.
        let site = window_site(&[&SYNC, &DROPOUT, &SYNC, &sample(1), &sample(2), &sample(4)]);
        let stretch = vec![
            sample(1),
            sample(2),
            SYNC.to_vec(),
            sample(3),
            SYNC.to_vec(),
            sample(4),
        ];
        let Outcome::Filled {
            records,
            recovered,
            from,
            to,
            ..
        } = merge(&site, None, None, &stretch)
        else {
            panic!("a window is filled");
        };
        assert_eq!(records, stretch.concat(), "the SD log's records, each once");
        assert_eq!(recovered, 1, "sample 3");
        assert_eq!((from, to), (100, site.end));
    }

    #[test]
    fn a_window_keeps_what_the_sd_log_lacks_after_the_record_before_it() {
        let site = window_site(&[&sample(1), &sample(2), &sample(3)]);
        let stretch = vec![sample(1), sample(3)];
        let Outcome::Filled {
            records, recovered, ..
        } = merge(&site, None, None, &stretch)
        else {
            panic!("a window is filled");
        };
        assert_eq!(records, [sample(1), sample(2), sample(3)].concat());
        assert_eq!(recovered, 0);
    }
}
