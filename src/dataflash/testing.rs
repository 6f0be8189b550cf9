//! DataFlash messages made by hand for the tests of the parts that read them.

/// A DataFlash message of `format` with these field bytes after the header.
pub fn df(format: &crate::dataflash::Format, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0xA3, 0x95, format.type_id];
    m.extend_from_slice(body);
    assert_eq!(m.len(), format.length as usize, "{}", format.name);
    m
}

pub fn df_format(type_id: u8, name: &str, chars: &str, labels: &str) -> crate::dataflash::Format {
    let length = 3 + chars
        .bytes()
        .map(|c| crate::dataflash::format::field_size(c).unwrap())
        .sum::<usize>();
    crate::dataflash::Format {
        type_id,
        length: length as u8,
        name: name.into(),
        format: chars.into(),
        labels: labels.split(',').map(String::from).collect(),
    }
}

pub fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut b = [0u8; N];
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

/// A short ArduPilot log: FMTU marks BAT's instance field; a PARM and a text at startup; an
/// ATT (its yaw in hundredths), BAT instance 1 then 0, the PARM changed (and written again
/// unchanged), and the receiver's own dropout mark.
pub fn ardupilot_log() -> Vec<u8> {
    let fmtu = df_format(172, "FMTU", "QBNN", "TimeUS,FmtType,UnitIds,MultIds");
    let att = df_format(35, "ATT", "Qffc", "TimeUS,Roll,Pitch,Yaw");
    let bat = df_format(40, "BAT", "QBf", "TimeUS,Inst,Volt");
    let msg = df_format(91, "MSG", "QZ", "TimeUS,Message");
    let parm = df_format(64, "PARM", "QNf", "TimeUS,Name,Value");
    let mut log: Vec<u8> = [&fmtu, &att, &bat, &msg, &parm]
        .iter()
        .flat_map(|f| f.to_bytes())
        .collect();
    let body = |t: u64, rest: &[&[u8]]| -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        rest.iter().for_each(|r| b.extend_from_slice(r));
        b
    };
    log.extend(df(
        &fmtu,
        &body(1, &[&[40], &padded::<16>("s#v"), &[0; 16]]),
    ));
    log.extend(df(
        &parm,
        &body(2, &[&padded::<16>("LOG_BACKEND_TYPE"), &3f32.to_le_bytes()]),
    ));
    log.extend(df(&msg, &body(3, &[&padded::<64>("ArduCopter V4.6.0")])));
    let att_body = body(
        1_000,
        &[
            &0.25f32.to_le_bytes(),
            &(-0.5f32).to_le_bytes(),
            &(-1234i16).to_le_bytes(),
        ],
    );
    log.extend(df(&att, &att_body));
    log.extend(df(&bat, &body(1_100, &[&[1], &12.5f32.to_le_bytes()])));
    log.extend(df(&bat, &body(1_200, &[&[0], &16.0f32.to_le_bytes()])));
    // A parameter the startup listed, changed in flight, then written again unchanged.
    for t in [1_300, 1_350] {
        log.extend(df(
            &parm,
            &body(t, &[&padded::<16>("LOG_BACKEND_TYPE"), &7f32.to_le_bytes()]),
        ));
    }
    log.extend(df(
        &msg,
        &body(1_400, &[&padded::<64>("ulog-recv: dropout of 250 ms")]),
    ));
    log
}
