//! A step's `expect`, held against what the step came to.

use super::*;

impl Replay {
    /// What is wrong with an outcome given the step's `expect`; `None` if
    /// nothing. An expectation that cannot be read is a failure of its own.
    pub(super) fn check(&self, expect: &Fields, done: &Outcome) -> Result<Option<String>, Failure> {
        let Some(want) = expect.get("error") else {
            return match &done.result {
                Err(error) => Ok(Some(format!("failed: {error} ({error:?})"))),
                Ok(fields) => self.fields(expect, fields),
            };
        };
        let error = match &done.result {
            Err(error) => error,
            Ok(fields) => {
                let got = Value::Object(fields.clone());
                return Ok(Some(format!(
                    "succeeded ({got}), but the scenario expects the error {want}"
                )));
            }
        };
        let kinds: Vec<&str> = match want {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => {
                return Err(format!(
                    "expect: error {want} is not a kind or list of kinds"
                ))
            }
        };
        let (kind, fields) = error_of(error);
        if !kinds.contains(&kind) {
            return Ok(Some(format!(
                "failed with {kind} ({error}), but the scenario expects {want}"
            )));
        }
        let mut rest = expect.clone();
        rest.remove("error");
        self.fields(&rest, &fields)
    }

    pub(super) fn fields(&self, expect: &Fields, got: &Fields) -> Result<Option<String>, Failure> {
        let mut keys: Vec<&String> = expect.keys().collect();
        keys.sort();
        for key in keys {
            let Some(value) = got.get(key) else {
                let got = Value::Object(got.clone());
                return Ok(Some(format!(
                    "the result has no field {key:?} (this client cannot express it): {got}"
                )));
            };
            if let Some(problem) = self.matches(&expect[key], value)? {
                let got = Value::Object(got.clone());
                return Ok(Some(format!("{key}: {problem} (result {got})")));
            }
        }
        Ok(None)
    }

    /// One field: equal to a value or a `$` reference, or every comparison
    /// of an object holds.
    pub(super) fn matches(&self, want: &Value, got: &Value) -> Result<Option<String>, Failure> {
        let Value::Object(comparisons) = want else {
            let value = self.resolve("expect", want)?;
            return Ok((!same(&value, got)).then(|| format!("{got}, want {value}")));
        };
        for (op, raw) in comparisons {
            let operand = self.resolve("expect", raw)?;
            if op == "!=" {
                if same(&operand, got) {
                    return Ok(Some(format!("{got}, want != {operand}")));
                }
                continue;
            }
            let holds: fn(Ordering) -> bool = match op.as_str() {
                ">" => Ordering::is_gt,
                ">=" => Ordering::is_ge,
                "<" => Ordering::is_lt,
                "<=" => Ordering::is_le,
                _ => return Err(format!("expect: unknown comparison {op:?}")),
            };
            let order = match (got, &operand) {
                (Value::Number(a), Value::Number(b)) => compare(a, b),
                _ => None,
            };
            match order {
                None => return Ok(Some(format!("{got} {op} {operand} compares numbers only"))),
                Some(order) if !holds(order) => {
                    return Ok(Some(format!("{got}, want {op} {operand}")));
                }
                Some(_) => {}
            }
        }
        Ok(None)
    }
}

/// Two JSON numbers in order: exactly when both are whole.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let exact = |n: &Number| (n.as_i64().map(i128::from)).or(n.as_u64().map(i128::from));
    match (exact(a), exact(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// Equal as JSON values: numbers by value, but `true` is not `1`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => compare(a, b) == Some(Ordering::Equal),
        _ => a == b,
    }
}
