//! Which of the SD log's records a column of a session takes, sans-IO. The SD log holds
//! every topic; a session stored in columns ([`crate::store::columns`]) keeps each topic in
//! one column, so each column's fill takes only its own topics' records (none lands in two
//! columns), and an event buffer's only inside the windows it wrote (the fill must not bring
//! back what the buffer chose not to keep). Routed as the column router routes the stream:
//!
//! | message | taken by |
//! |---|---|
//! | a subscription, its samples, its removal | the column of its message id (the main column for an id no column has) |
//! | flag bits, info, multi-info, parameters, sync, dropouts | every column |
//! | logged strings, anything else | the main column |

use std::collections::HashSet;

use crate::ulog::message::{is_whole_log, msg_type};

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct ColumnFilter {
    /// The message ids of the column's subscriptions; `None`: every record (a session of
    /// one column).
    own: Option<HashSet<u16>>,
    /// The ids the other columns take (the main column takes every id not among them).
    others: HashSet<u16>,
    main: bool,
    /// Only the ids a column names: the session lost a column's definitions, and the main
    /// column no longer takes an id no column has (it may be the lost column's).
    named_only: bool,
    /// An event buffer's windows (`[from, to]` µs of log time): its samples only inside.
    windows: Option<Vec<[u64; 2]>>,
}

impl ColumnFilter {
    /// Every record (a session stored in one column).
    pub fn all() -> Self {
        Self {
            main: true,
            ..Self::default()
        }
    }

    /// The filter of a column whose subscriptions have the ids `own`, beside columns with
    /// `others`; `main` for the main column.
    pub fn column(own: HashSet<u16>, others: HashSet<u16>, main: bool) -> Self {
        Self {
            own: Some(own),
            others,
            main,
            named_only: false,
            windows: None,
        }
    }

    /// An event buffer: its samples only inside `windows`.
    pub fn with_windows(mut self, windows: Vec<[u64; 2]>) -> Self {
        self.windows = Some(windows);
        self
    }

    /// Whether the column's splits named no subscription (it lost them all, or the log has
    /// none of its topics): the session's definitions may not cover the SD log.
    pub fn owns_no_id(&self) -> bool {
        self.own.as_ref().is_some_and(HashSet::is_empty)
    }

    /// From now on takes only the ids a column names (its own, and those
    /// [`adopt`](Self::adopt)ed): the session lost a column's definitions, and a record
    /// whose subscription no definition names may be that column's. (No reader could decode
    /// it either: its file names no format for it.)
    pub fn named_only(&mut self) {
        self.named_only = true;
    }

    /// Takes `id`, a subscription the session's definitions lacked, as the column's own
    /// (`own`) or another column's.
    pub fn adopt(&mut self, id: u16, own: bool) {
        if let Some(ids) = &mut self.own {
            if own {
                ids.insert(id);
            } else {
                self.others.insert(id);
            }
        }
    }

    /// Whether the column takes `raw` (one framed message), stamped `timestamp` (a data
    /// record's, when the flight's definitions date it).
    pub fn keeps(&self, raw: &[u8], timestamp: Option<u64>) -> bool {
        let id_at = |at: usize| {
            raw.get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        match raw[2] {
            msg_type::DATA | msg_type::REMOVE_LOGGED => {
                self.owns(id_at(3)) && (raw[2] != msg_type::DATA || self.in_window(timestamp))
            }
            msg_type::ADD_LOGGED => self.owns(id_at(4)),
            ty if is_whole_log(ty) => true,
            _ => self.main,
        }
    }

    fn owns(&self, id: Option<u16>) -> bool {
        let Some(id) = id else { return self.main };
        match &self.own {
            None => true,
            Some(own) => {
                own.contains(&id) || (self.main && !self.named_only && !self.others.contains(&id))
            }
        }
    }

    fn in_window(&self, timestamp: Option<u64>) -> bool {
        match (&self.windows, timestamp) {
            (None, _) => true,
            (Some(windows), Some(t)) => windows.iter().any(|[from, to]| (*from..=*to).contains(&t)),
            // A sample without a time passes the buffer's gate ungated.
            (Some(_), None) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(id: u16) -> Vec<u8> {
        let mut m = vec![10, 0, msg_type::DATA];
        m.extend_from_slice(&id.to_le_bytes());
        m.extend_from_slice(&[0; 8]);
        m
    }

    #[test]
    fn each_id_goes_to_one_column_and_the_rest_to_the_main_one() {
        let main = ColumnFilter::column([1].into(), [2].into(), true);
        let imu = ColumnFilter::column([2].into(), [1].into(), false);
        for id in [1, 2, 7] {
            assert_ne!(
                main.keeps(&data(id), None),
                imu.keeps(&data(id), None),
                "id {id}"
            );
        }
        assert!(main.keeps(&data(7), None), "an id no column has");
        let sync = [8, 0, msg_type::SYNC, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(main.keeps(&sync, None) && imu.keeps(&sync, None));
        let string = [4, 0, msg_type::LOGGING, 6, 0, 0, 0];
        assert!(main.keeps(&string, None) && !imu.keeps(&string, None));
        assert!(ColumnFilter::all().keeps(&data(2), None));
    }

    #[test]
    fn after_a_column_lost_its_definitions_no_column_takes_an_id_none_names() {
        let mut main = ColumnFilter::column([1].into(), [].into(), true);
        let mut imu = ColumnFilter::column([].into(), [].into(), false);
        assert!(
            main.keeps(&data(7), None),
            "before: the main column takes it"
        );
        for f in [&mut main, &mut imu] {
            f.named_only();
        }
        main.adopt(2, false);
        imu.adopt(2, true);
        assert!(main.keeps(&data(1), None));
        assert!(imu.keeps(&data(2), None) && !main.keeps(&data(2), None));
        assert!(!main.keeps(&data(7), None) && !imu.keeps(&data(7), None));
    }

    #[test]
    fn an_event_buffer_takes_its_samples_only_inside_its_windows() {
        let buffer = ColumnFilter::column([2].into(), [].into(), false)
            .with_windows(vec![[100, 200], [500, 600]]);
        assert!(buffer.keeps(&data(2), Some(100)));
        assert!(buffer.keeps(&data(2), Some(600)));
        assert!(!buffer.keeps(&data(2), Some(300)));
        assert!(!buffer.keeps(&data(2), Some(601)));
    }
}
