module lockbroker.example/lock

go 1.19

require lockbroker.dev/lockbroker v0.0.0

replace lockbroker.dev/lockbroker => ../../clients/go
