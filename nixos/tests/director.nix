# The director shape on three machines: `director` runs auth, the director
# and the IMAP and LMTP logins; `backend1` and `backend2` run the IMAP and
# LMTP backends and register themselves with backend-reg. Mail delivered
# through lmtp-login is read back through imap-login, and each user's mail
# lives on exactly one backend (the one the director routes the user to).
{ self }:
let
  apiToken = "test-api-token";
  common = { pkgs, ... }: {
    imports = [ self.nixosModules.default ];
    environment.systemPackages = [ pkgs.python3 ];
    networking.firewall.enable = false;
    services.yarilo = {
      enable = true;
      settings = {
        auth.disable_plaintext_auth = false;
        auth_client.address = "director:9106";
      };
    };
  };
  backend = { config, ... }: {
    imports = [ common ];
    services.yarilo = {
      settings.general.xclient.trusted_nets = [ "192.168.1.0/24" ];
      components = {
        imap = {
          enable = true;
          settings.services.imap = { address = "0.0.0.0"; port = 10143; };
        };
        lmtp = {
          enable = true;
          settings.services.lmtp = { address = "0.0.0.0"; port = 10024; };
        };
        backend-reg = {
          enable = true;
          settings.backend_register = {
            director_addr = "director:9102";
            address = config.networking.primaryIPAddress;
            register_interval = 2;
            readyz_urls = [ "http://127.0.0.1:9195/readyz" "http://127.0.0.1:9201/readyz" ];
          };
        };
      };
    };
  };
in
{
  name = "yarilo-director";

  nodes = {
    director = { pkgs, ... }: {
      imports = [ common ];
      environment.etc."yarilo-test/api-token".text = apiToken;
      services.yarilo = {
        secrets.api-token.file = "/etc/yarilo-test/api-token";
        components = {
          auth = {
            enable = true;
            settings.auth_service.listen = "0.0.0.0:9106";
          };
          director = {
            enable = true;
            settings.director_service = {
              listen = "0.0.0.0:9102";
              backend_expire = 10;
              api.token = "credential:api-token";
            };
          };
          imap-login = {
            enable = true;
            settings = {
              services.imaps.enabled = false;
              login.imap = { director_addr = "127.0.0.1:9102"; backend_port = 10143; };
            };
          };
          lmtp-login = {
            enable = true;
            settings = {
              services.lmtp = { address = "127.0.0.1"; port = 24; };
              login.lmtp = { director_addr = "127.0.0.1:9102"; backend_port = 10024; };
            };
          };
        };
      };
      environment.systemPackages = [ pkgs.jq ];
    };
    backend1 = backend;
    backend2 = backend;
  };

  testScript = ''
    start_all()
    director.wait_for_unit("yarilo-director.service")
    director.wait_for_unit("yarilo-auth.service")
    for b in (backend1, backend2):
        b.wait_for_unit("yarilo-imap.service")
        b.wait_for_unit("yarilo-lmtp.service")
        b.wait_for_unit("yarilo-backend-reg.service")

    # No capability where no port is below 1024.
    director.succeed("systemctl show -p CapabilityBoundingSet yarilo-auth.service | grep -qx CapabilityBoundingSet=")

    # Both backends registered themselves.
    director.wait_until_succeeds(
        "yarctl director --token ${apiToken} backends list | jq -e 'length == 2'"
    )

    users = [f"user{i}" for i in range(8)]
    for u in users:
        director.succeed(f"runuser -u yarilo -- yarctl user add {u} --password pw-{u} --config /etc/yarilo/yarilo.yaml")
    director.wait_for_open_port(143)
    director.wait_for_open_port(24)
    for u in users:
        director.succeed(f"python3 ${./mail.py} deliver 127.0.0.1 24 {u} 'for {u}'")
        director.succeed(f"python3 ${./mail.py} read 127.0.0.1 143 {u} pw-{u} 'for {u}'")

    # Every user's mail is on exactly one backend, and both backends serve.
    held = {1: 0, 2: 0}
    for u in users:
        on = [n for n, b in ((1, backend1), (2, backend2))
              if b.execute(f"find /var/lib/yarilo/mail -maxdepth 2 -name {u} 2>/dev/null")[1].strip()]
        assert len(on) == 1, f"{u} is on backends {on}"
        held[on[0]] += 1
    assert held[1] > 0 and held[2] > 0, held
  '';
}
