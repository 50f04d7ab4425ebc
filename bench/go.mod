module github.com/aegislab/aegis/bench

go 1.26

replace github.com/aegislab/aegis => ../
