use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Parses a listen address: `host:port`, `[v6]:port`, or `:port` meaning
/// every IPv4 interface (the form the design documents use, e.g. `":9104"`).
pub fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Some(port) = value.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{value}`: port is not a number from 0 to 65535"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    value
        .parse()
        .map_err(|_| format!("`{value}` is not an address of the form host:port or :port"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colon_port_means_every_interface() {
        assert_eq!(
            parse_listen(":9104").unwrap(),
            "0.0.0.0:9104".parse().unwrap()
        );
        assert_eq!(
            parse_listen("[::1]:25").unwrap(),
            "[::1]:25".parse().unwrap()
        );
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen(":99999").is_err());
    }
}
