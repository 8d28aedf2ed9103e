module lockbroker.dev/lockbroker

go 1.19
