//! A metric point, as InfluxDB's line protocol and Prometheus's text format carry it: a
//! measurement, tags that say whose it is, numeric fields, and a time.

use crate::error::{Result, malformed};

/// One measurement at one time, as InfluxDB's line protocol has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The measurement's name.
    pub measurement: String,
    /// Its tags, `(key, value)`.
    pub tags: Vec<(String, String)>,
    /// Its fields, `(key, value)`.
    pub fields: Vec<(String, f64)>,
    /// Nanoseconds since the Unix epoch.
    pub time: u64,
}

impl Point {
    /// One line of InfluxDB's line protocol (without its newline).
    pub fn to_line(&self) -> String {
        let mut s = escape(&self.measurement, ", ");
        for (k, v) in &self.tags {
            s.push_str(&format!(",{}={}", escape(k, ",= "), escape(v, ",= ")));
        }
        let fields: Vec<String> = self.fields.iter().map(|(k, v)| format!("{}={v}", escape(k, ",= "))).collect();
        s.push_str(&format!(" {} {}", fields.join(","), self.time));
        s
    }

    /// Reads back a line that [`to_line`](Self::to_line) wrote.
    pub fn from_line(line: &str) -> Result<Point> {
        let bad = |why: &str| malformed("metric line", format!("{why}: {line:?}"));
        let parts = split_unescaped(line, ' ');
        let [key, fields, time] = parts.as_slice() else { return Err(bad("not three parts")) };
        let mut key = split_unescaped(key, ',').into_iter();
        let measurement = unescape(&key.next().ok_or_else(|| bad("no measurement"))?);
        let pair = |kv: String| -> Result<(String, String)> {
            let kv = split_unescaped(&kv, '=');
            match kv.as_slice() {
                [k, v] => Ok((unescape(k), unescape(v))),
                _ => Err(bad("not key=value")),
            }
        };
        let tags = key.map(pair).collect::<Result<Vec<_>>>()?;
        let fields = split_unescaped(fields, ',')
            .into_iter()
            .map(|kv| {
                let (k, v) = pair(kv)?;
                Ok((k, v.parse::<f64>().map_err(|_| bad("a field that is not a number"))?))
            })
            .collect::<Result<Vec<_>>>()?;
        let time = time.parse().map_err(|_| bad("a time that is not a number"))?;
        Ok(Point { measurement, tags, fields, time })
    }
}

fn escape(s: &str, special: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if special.contains(c) || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next().unwrap_or('\\') } else { c });
    }
    out
}

/// Splits at `sep` where no backslash escapes it; the parts stay escaped.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let part = parts.last_mut().expect("one at least");
        if c == '\\' {
            part.push(c);
            part.extend(chars.next());
        } else if c == sep {
            parts.push(String::new());
        } else {
            part.push(c);
        }
    }
    parts
}

/// Prometheus's text format for the newest of `points`: one gauge per measurement and field,
/// named `wirespeed_<measurement>_<field>`, labelled with the tags.
pub fn prometheus_text(points: &[Point]) -> String {
    let mut by_name: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for p in points {
        let labels: Vec<String> =
            p.tags.iter().map(|(k, v)| format!("{}=\"{}\"", metric_name(k), label_value(v))).collect();
        for (field, value) in &p.fields {
            let name = format!("wirespeed_{}_{}", metric_name(&p.measurement), metric_name(field));
            by_name.entry(name.clone()).or_default().push(format!("{name}{{{}}} {value}", labels.join(",")));
        }
    }
    let mut out = String::new();
    for (name, samples) in by_name {
        out.push_str(&format!("# HELP {name} wirespeed fles, as the line protocol's measurement and field\n"));
        out.push_str(&format!("# TYPE {name} gauge\n"));
        samples.iter().for_each(|s| out.push_str(&format!("{s}\n")));
    }
    out
}

/// A name of letters, digits and underscores, as Prometheus allows.
fn metric_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn point() -> Point {
        Point {
            measurement: "fles_compute".into(),
            tags: vec![("host".into(), "a b,c".into()), ("node".into(), "1".into())],
            fields: vec![("fill".into(), 0.25), ("timeslices".into(), 40.0)],
            time: 1_700_000_000_000_000_000,
        }
    }

    /// A test vector: the line InfluxDB reads, spaces and commas in tags escaped.
    #[test]
    fn writes_the_line_protocol() {
        assert_eq!(point().to_line(), r"fles_compute,host=a\ b\,c,node=1 fill=0.25,timeslices=40 1700000000000000000");
        assert_eq!(Point::from_line(&point().to_line()).ok(), Some(point()));
        assert!(Point::from_line("m f=x 1").is_err());
        assert!(Point::from_line("m f=1").is_err());
    }

    #[test]
    fn writes_prometheus_gauges() {
        let text = prometheus_text(&[point()]);
        assert_eq!(
            text,
            "# HELP wirespeed_fles_compute_fill wirespeed fles, as the line protocol's measurement and field\n\
             # TYPE wirespeed_fles_compute_fill gauge\n\
             wirespeed_fles_compute_fill{host=\"a b,c\",node=\"1\"} 0.25\n\
             # HELP wirespeed_fles_compute_timeslices wirespeed fles, as the line protocol's measurement and field\n\
             # TYPE wirespeed_fles_compute_timeslices gauge\n\
             wirespeed_fles_compute_timeslices{host=\"a b,c\",node=\"1\"} 40\n"
        );
    }

    proptest! {
        #[test]
        fn lines_read_back(
            m in "[a-z ,=\\\\]{1,8}",
            tag in "[a-z ,=\\\\]{1,8}",
            value in any::<f64>().prop_filter("finite", |v| v.is_finite()),
            time in any::<u64>(),
        ) {
            let p = Point { measurement: m, tags: vec![("t".into(), tag)], fields: vec![("f".into(), value)], time };
            prop_assert_eq!(Point::from_line(&p.to_line()).ok(), Some(p));
        }

        #[test]
        fn reading_never_panics(line in ".{0,60}") {
            let _ = Point::from_line(&line);
        }
    }
}
