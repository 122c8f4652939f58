# `yarilo single` from the module: a user added with yarctl receives a
# message over LMTP and reads it over IMAP (STARTTLS) from another machine.
{ self }:
{
  name = "yarilo-single";

  nodes = {
    server = { pkgs, ... }: {
      imports = [ self.nixosModules.default ];
      environment.systemPackages = [ pkgs.python3 ];
      services.yarilo = {
        enable = true;
        openFirewall = true;
        components.single.enable = true;
        settings = {
          general.hostname = "server";
          # LMTP for the local MTA only.
          services.lmtp.address = "127.0.0.1";
        };
      };
    };
    client = { pkgs, ... }: {
      environment.systemPackages = [ pkgs.python3 ];
    };
  };

  testScript = ''
    start_all()
    server.wait_for_unit("yarilo-single.service")
    server.wait_for_open_port(143)
    server.wait_for_open_port(24)
    server.succeed("runuser -u yarilo -- yarctl user add alice --password a-long-secret --config /etc/yarilo/yarilo.yaml")
    server.succeed("python3 ${./mail.py} deliver 127.0.0.1 24 alice 'via lmtp'")
    client.wait_until_succeeds("python3 ${./mail.py} read server 143 alice a-long-secret 'via lmtp'")

    # Hardening holds: the unit runs unprivileged, with only the capability
    # its ports below 1024 need.
    server.succeed("systemctl show -p User yarilo-single.service | grep -qx User=yarilo")
    server.succeed("systemctl show -p CapabilityBoundingSet yarilo-single.service | grep -qx CapabilityBoundingSet=cap_net_bind_service")
    server.succeed("systemctl show -p ProtectSystem yarilo-single.service | grep -qx ProtectSystem=strict")
    server.succeed("systemctl show -p LimitNOFILE yarilo-single.service | grep -qx LimitNOFILE=65535")

    # The mail is on the data directory and survives a restart.
    server.succeed("systemctl restart yarilo-single.service")
    server.wait_for_open_port(143)
    client.wait_until_succeeds("python3 ${./mail.py} read server 143 alice a-long-secret 'via lmtp'")
  '';
}
