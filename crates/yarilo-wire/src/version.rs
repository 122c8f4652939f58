use crate::WireError;

/// The `VERSION\t<service>\t<major>\t<minor>` line each side sends first.
/// A different major means the peers cannot talk; a different minor only
/// limits what either side may send to what both know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub service: String,
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub fn new(service: impl Into<String>, major: u32, minor: u32) -> Self {
        Version {
            service: service.into(),
            major,
            minor,
        }
    }

    pub fn to_fields(&self) -> Vec<String> {
        vec![
            "VERSION".to_string(),
            self.service.clone(),
            self.major.to_string(),
            self.minor.to_string(),
        ]
    }

    pub fn from_fields(fields: &[String]) -> Result<Version, WireError> {
        let bad = |detail: &str| WireError::Malformed {
            what: "VERSION line",
            detail: detail.to_string(),
        };
        match fields {
            [cmd, service, major, minor] if cmd == "VERSION" => Ok(Version {
                service: service.clone(),
                major: major.parse().map_err(|_| bad("major is not a number"))?,
                minor: minor.parse().map_err(|_| bad("minor is not a number"))?,
            }),
            _ => Err(bad("expected VERSION <service> <major> <minor>")),
        }
    }

    /// Whether a peer announcing `other` can talk to us.
    pub fn compatible_with(&self, other: &Version) -> bool {
        self.service == other.service && self.major == other.major
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_compatibility() {
        let v = Version::new("locks", 1, 2);
        let back = Version::from_fields(&v.to_fields()).unwrap();
        assert_eq!(back, v);
        assert!(v.compatible_with(&Version::new("locks", 1, 0)));
        assert!(!v.compatible_with(&Version::new("locks", 2, 0)));
        assert!(!v.compatible_with(&Version::new("auth", 1, 2)));
        assert!(Version::from_fields(&["VERSION".into(), "x".into()]).is_err());
    }
}
